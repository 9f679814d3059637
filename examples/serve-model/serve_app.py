"""The Ray Serve application: loads the model tau pinned ($TAU_MODEL_DIR/model.json) and
classifies `{"features": [sepal_length, sepal_width, petal_length, petal_width]}`.
GET answers with the model's version (the service's readiness path)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from ray import serve
from starlette.requests import Request


@serve.deployment
class Classifier:
    def __init__(self) -> None:
        doc = json.loads((Path(os.environ["TAU_MODEL_DIR"]) / "model.json").read_text())
        self.classes = doc["classes"]
        self.mean = np.array(doc["mean"])
        self.w, self.b = np.array(doc["weights"]), np.array(doc["bias"])
        self.version = os.environ.get("TAU_MODEL_VERSION", "")
        self.revision = os.environ.get("TAU_SERVICE_REVISION", "")

    async def __call__(self, request: Request) -> dict[str, object]:
        about = {"model_version": self.version, "revision": self.revision}
        if request.method == "GET":
            return {"status": "ok", **about}
        body = await request.json()
        x = np.asarray(body["features"], dtype=float).reshape(-1, 4) - self.mean
        z = x @ self.w + self.b
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return {
            "classes": [self.classes[i] for i in p.argmax(axis=1)],
            "probabilities": p.round(4).tolist(),
            **about,
        }


app = Classifier.bind()
