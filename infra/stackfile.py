"""Stack files: finding a project's stacks and reading one stack's `taugrid:platform` config.

No Pulumi import: `tau platform snapshot` and validation work without the `platform` extra.
The stacks are the project's (Pulumi.yaml's `stackConfigDir`, found from the current folder
upwards, as the Pulumi CLI does), never files inside the installed package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taugrid.api.documents import parse_yaml
from taugrid.api.errors import ConfigError, TauError
from taugrid.api.issues import Issue, config_error
from taugrid.api.platform import CONFIG_KEY, PlatformConfig, PlatformConfigError, validate_platform

PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml")


def _project_file(folder: Path) -> Path | None:
    return next((folder / n for n in PROJECT_FILES if (folder / n).is_file()), None)


def _stacks_of(project: Path) -> Path:
    """The folder of a project's stack files (its `stackConfigDir`, else its own folder)."""
    data = _read_yaml(project, "Pulumi project file")
    sub = data.get("stackConfigDir") if isinstance(data, dict) else None
    return project.parent / sub if isinstance(sub, str) and sub else project.parent


def find_stacks_dir(start: Path | None = None) -> Path:
    """The stack folder of the Pulumi project that holds `start` (default: the current folder)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        project = _project_file(folder)
        if project is not None:
            return _stacks_of(project)
    raise TauError(
        f"no Pulumi project in {here} or its parents (looked for {' / '.join(PROJECT_FILES)})",
        hint="run this inside the platform project (where Pulumi.yaml is), or pass --stacks-dir",
    )


def project_dir(stacks_dir: Path) -> Path | None:
    """The Pulumi project whose stack files are in `stacks_dir` (its Pulumi.yaml is there, or
    above it with `stackConfigDir` naming it); None: stack files outside any project."""
    target = stacks_dir.resolve()
    for folder in (target, *target.parents):
        project = _project_file(folder)
        if project is not None:
            return folder if _stacks_of(project).resolve() == target else None
    return None


def project_backend(folder: Path) -> tuple[Path, str] | None:
    """(project file, `backend.url`) when the project names its backend, as `pulumi` reads it."""
    project = _project_file(folder)
    data = _read_yaml(project, "Pulumi project file") if project else None
    backend = data.get("backend") if isinstance(data, dict) else None
    url = backend.get("url") if isinstance(backend, dict) else None
    return (project, url) if project and isinstance(url, str) and url else None


def secrets_settings(stack_file: Path) -> tuple[str | None, bool]:
    """(`secretsprovider`, whether there is an `encryptionsalt`) of a stack file (none: no file)."""
    if not stack_file.is_file():
        return None, False
    data = _read_yaml(stack_file, "stack file")
    if not isinstance(data, dict):
        return None, False
    provider = data.get("secretsprovider")
    return (
        provider if isinstance(provider, str) and provider else None,
        bool(data.get("encryptionsalt")),
    )


def _read_yaml(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TauError(f"{path}: cannot read this {what} ({e})") from None
    return parse_yaml(text, str(path))


def stack_names(stacks_dir: Path) -> list[str]:
    return sorted(p.name.split(".")[1] for p in stacks_dir.glob("Pulumi.*.yaml"))


def read_stack_config(stack: str, stacks_dir: Path | None = None) -> tuple[Path, str, Any]:
    """(path, text, the `taugrid:platform` object) of <stacks>/Pulumi.<stack>.yaml."""
    stacks_dir = stacks_dir or find_stacks_dir()
    path = stacks_dir / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        known = ", ".join(stack_names(stacks_dir)) or "(none)"
        raise TauError(f"no stack {stack!r}: {path} does not exist; stacks: {known}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TauError(f"{path}: cannot read this stack file ({e})") from None
    data = parse_yaml(text, str(path))
    cfg = (data or {}).get("config") if isinstance(data, dict) else None
    if not isinstance(cfg, dict) or CONFIG_KEY not in cfg:
        example = f"config:\n  {CONFIG_KEY}: {{cluster: ...}}"
        issue = Issue(
            f"config.{CONFIG_KEY}", None, "is required: the platform declaration", example
        )
        raise ConfigError(str(path), [issue])
    return path, text, cfg[CONFIG_KEY]


def validated(stack: str, stacks_dir: Path | None = None) -> PlatformConfig:
    """The stack's PlatformConfig, or a ConfigError naming the stack file and key paths."""
    path, text, data = read_stack_config(stack, stacks_dir)
    try:
        return validate_platform(data)
    except PlatformConfigError as e:
        raise located_error(str(path), text, e) from None


def located_error(source: str, text: str | None, e: PlatformConfigError) -> ConfigError:
    """The problems of a `taugrid:platform` declaration as tau says them: the file, each key
    path (with its line when the file's text is known), the value, the fix."""
    issues = [
        Issue(f"config.{CONFIG_KEY}.{i.path}", i.value, i.message, i.example) for i in e.issues
    ]
    return config_error(source, text, issues) if text is not None else ConfigError(source, issues)


def program_error(stack: str, e: PlatformConfigError) -> ConfigError:
    """For the program run by plain `pulumi`: the stack file's lines when it is the project's
    stack file that holds the config (else the config as Pulumi passed it)."""
    try:
        path, text, data = read_stack_config(stack)
        validate_platform(data)
    except PlatformConfigError as from_file:
        return located_error(str(path), text, from_file)
    except TauError:
        pass
    return located_error(f"stack {stack}'s config", None, e)
