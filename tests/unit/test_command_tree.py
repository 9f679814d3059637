"""The command tree is fixed here, on purpose: a new, renamed or removed command or option fails
this test until the tree below is updated with it (and the docs say so). Also the rules the
tree follows: one meaning of `-w`, `--context` on every command that talks to a cluster, the
root help grouped by audience, and old spellings that still work with a note."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from taugrid.cli.app import AUDIENCES, app, deprecated_spellings

TREE = """
cluster nodes: --context --output --pool -o
cluster validate installation: --context --output -o
cluster validate nodes: --active --context --keep --no-keep --output --pool --timeout -o
controller run: --config --context --dry-run --standalone
crds: --output -o
data dataset alias get: --output --registry -o
data dataset alias history: --output --registry -o
data dataset alias rm: --expect --output --registry -o
data dataset alias set: --expect --expect-absent --output --registry -o
data dataset copy: --output --registry --to -o
data dataset list: --output --registry -o
data dataset pull: --force --registry
data dataset repair: --from --output --registry -o
data dataset ref: --output --registry -o
data dataset register: --description --output --purpose --registry --tag -o
data dataset rm: --registry --yes
data dataset show: --output --registry -o
data dataset verify: --output --registry -o
data gc: --dry-run --output --registry -o
data lineage: --output --registry -o
data model alias get: --output --registry -o
data model alias history: --output --registry -o
data model alias rm: --expect --output --registry -o
data model alias set: --expect --expect-absent --output --registry -o
data model copy: --output --registry --to -o
data model list: --output --registry -o
data model pull: --force --registry
data model repair: --from --output --registry -o
data model ref: --output --registry -o
data model register: --checkpoint --context --description --from-run --output --purpose --registry --tag -o
data model rm: --registry --yes
data model show: --output --registry -o
data model verify: --output --registry -o
local start: --output -o
local status: --output -o
local stop:
logs: --context --follow -f
platform ci down: --output --passed --stacks-dir -o
platform ci list: --output -o
platform ci reap: --output -o
platform ci up: --from --name --no-policies --output --policy-pack --stacks-dir --ttl -o
platform destroy: --output --stack --stacks-dir --yes -o -s -y
platform diff: --all --output --stacks-dir -o
platform plan: --output --stack --stacks-dir -o -s
platform preview: --no-policies --output --policy-pack --refresh --stack --stacks-dir -o -s
platform promote: --output --stacks-dir --yes -o -y
platform refresh: --output --stack --stacks-dir -o -s
platform snapshot: --stack --stacks-dir -s
platform up: --no-policies --output --policy-pack --refresh --stack --stacks-dir --yes -o -s -y
portal: --allowed-hosts --context --host --open --port
profiles: --context --output -o
quota approve: --context --note --output --workspace -o
quota deny: --context --note --output --workspace -o
quota list: --all --context --output --workspace -A -o
quota request: --context --for --gpus --output --profile --reason --workspace -o
quota status: --context --output --team -o
run attach: --context --detach -d
run cancel: --context
run gc: --output -o
run list: --cluster --context --mine --output --worker --workspace -o
run logs: --context --follow -f
run metrics: --context --metric --output --png -m -o
run pull: --checkpoints --context --force --logs --metrics --output --outputs --to -o
run render: --output --profile --profiles --run-id --workspace -o -p
run resume: --context --detach --python --ray-pip -d
run schema:
run status: --context --output --watch -o -w
run submit: --config --context --detach --dry-run --output --profile --profiles --python --ray-pip --run-id --strict --target --workspace -c -d -o -p -t
run validate: --output --profile --profiles --workspace -o -p
run verify: --context
sandbox down:
sandbox gpu: --busy --diag-fail --diag-pass --down --garbage --idle --missing --nccl-gbps --output --reset --sane --up --xid -o
sandbox kubeconfig: --as
sandbox status: --output -o
sandbox up: --clusters --no-platform --real-nodes --stack --stacks-dir -s
serve delete: --output -o
serve deploy: --checkpoint --context --from-run --model --name --no-wait --output --port --profile --target --workspace -o -t
serve invoke: --data --data-raw --output --path -d -o
serve list: --output -o
serve logs: --follow --tail -f
serve promote: --no-wait --output -o
serve rollback: --no-wait --output --to -o
serve rollout: --checkpoint --from-run --model --no-wait --output --step --strategy -o
serve scale: --max --min --output --replicas -o
serve status: --output --watch -o -w
usage: --by --context --output --since --team --workspace -o
version: --short
workspaces: --context --output -o
"""  # noqa: E501 (data: its lines are what they are)


def commands(cmd: Any = None, path: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every command as click finds it (the root builds its groups when asked for them)."""
    cmd = cmd if cmd is not None else typer.main.get_command(app)
    if hasattr(cmd, "list_commands"):
        out: dict[str, Any] = {}
        ctx = typer.Context(cmd)
        for name in cmd.list_commands(ctx):
            out.update(commands(cmd.get_command(ctx, name), (*path, name)))
        return out
    return {" ".join(path): cmd}


def options(cmd: Any) -> list[str]:
    return sorted(o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-"))


def test_the_command_tree_is_the_one_written_here() -> None:
    got = {name: options(c) for name, c in commands().items()}
    want = {}
    for line in TREE.strip().splitlines():
        name, _, opts = line.partition(":")
        want[name] = opts.split()
    assert sorted(got) == sorted(want), "a command was added, renamed or removed"
    for name in want:
        assert got[name] == want[name], f"the options of `tau {name}` changed"


def test_w_means_watch_only() -> None:
    for name, cmd in commands().items():
        for p in cmd.params:
            if "-w" in p.opts:
                assert "--watch" in p.opts, f"`tau {name}`: -w is --watch (as kubectl's)"


# Commands that talk to a cluster take --context (and read TAU_CONTEXT); the offline ones don't.
OFFLINE = {
    "run validate",
    "run render",
    "run schema",
    "run gc",
    "crds",
    "version",
    "local start",
    "local status",
    "local stop",
}


@pytest.mark.parametrize(
    "name",
    [
        "run " + c
        for c in (
            "attach",
            "cancel",
            "list",
            "logs",
            "metrics",
            "pull",
            "resume",
            "status",
            "submit",
            "verify",
        )
    ]
    + [
        "logs",
        "profiles",
        "workspaces",
        "quota request",
        "quota list",
        "quota approve",
        "quota deny",
        "quota status",
        "usage",
        "controller run",
    ],
)
def test_every_cluster_command_takes_context(name: str) -> None:
    assert "--context" in options(commands()[name])
    assert name not in OFFLINE


def test_the_root_help_is_grouped_by_audience(capsys: pytest.CaptureFixture[str]) -> None:
    from taugrid.cli.app import main

    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    heads = [text.index(f"{title}:") for title in AUDIENCES]
    assert heads == sorted(heads), "sections in the order researchers, admins, development"
    assert "Other:" not in text, "every command belongs to an audience"
    top = {n.split()[0] for n in commands()}
    assert top == {c for cmds in AUDIENCES.values() for c in cmds}


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["run", "tau.yaml", "-w", "llm"], ["run", "tau.yaml", "--workspace", "llm"]),
        (["run", "validate", "-w", "llm"], ["run", "validate", "--workspace", "llm"]),
        (["quota", "list", "-w", "research"], ["quota", "list", "--workspace", "research"]),
        (["run", "status", "r-1", "-w"], ["run", "status", "r-1", "-w"]),  # --watch
    ],
)
def test_the_old_w_for_workspace_still_works_with_a_note(
    argv: list[str], want: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert deprecated_spellings(argv) == want
    note = capsys.readouterr().err
    assert ("deprecated" in note) == (argv != want)


def _eager(name: str) -> Any:
    """Group `name` as Typer builds it at once (every command from its signature)."""
    from taugrid.cli.app import GROUPS, SETTINGS

    holder = typer.Typer(**SETTINGS)
    holder.add_typer(GROUPS[name], name=name)
    holder.command("_")(lambda: None)
    return typer.main.get_group(holder).commands[name]


def _shape(cmd: Any) -> Any:
    """What a user meets of a command: its help, and each option's spellings and defaults."""
    params = [
        (
            p.name,
            p.opts,
            p.secondary_opts,
            p.required,
            repr(p.default),
            p.multiple,
            getattr(p, "help", None),
            getattr(p, "hidden", False),
        )
        for p in cmd.params
    ]
    return (
        type(cmd).__name__ if hasattr(cmd, "list_commands") else "command",
        cmd.help,
        cmd.hidden,
        cmd.no_args_is_help if hasattr(cmd, "no_args_is_help") else None,
        params,
    )


def test_groups_built_one_command_at_a_time_are_the_groups_typer_builds() -> None:
    from taugrid.cli.app import GROUPS

    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    for name in GROUPS:
        lazy = commands(root.get_command(ctx, name), (name,))
        eager = commands(_eager(name), (name,))
        assert sorted(lazy) == sorted(eager)
        for path in eager:
            assert _shape(lazy[path]) == _shape(eager[path]), f"`tau {path}` differs"


def test_a_command_builds_only_itself() -> None:
    root = typer.main.get_command(app)
    ctx = typer.Context(root)
    group = root.get_command(ctx, "run")
    assert group.commands == {}
    assert group.get_command(ctx, "status").name == "status"
    assert list(group.commands) == ["status"]
    assert group.get_command(ctx, "no-such") is None
    data = root.get_command(ctx, "data")
    dataset = data.get_command(ctx, "dataset")
    assert list(data.commands) == ["dataset"] and dataset.commands == {}
    assert dataset.get_command(ctx, "alias").get_command(ctx, "set").name == "set"
