"""The edge-inference example's model: a small torch classifier of gridded fields, exported to
ONNX for onnxruntime-web, and the same model run by onnxruntime in Python for reference.

    python model.py export OUT.onnx [--channels 8] [--classes 4] [--stride 1] [--center 280] [--scale 0.1] [--seed 0]
    python model.py predict MODEL.onnx < batches.json > outputs.json

The model takes one variable's batch as the loader yields it, float32 [batch, lat, lon], and
returns class probabilities [batch, classes]: standardize ((x - center) * scale, what a deployed
model ships with), a 3x3 convolution (`stride` thins its output grid: less work per sample),
ReLU, the mean over the grid, a linear head, softmax. Every axis is dynamic, so one file takes
any batch size and any grid (the tests' fixtures are 6x7 and 10x12 fields, the README's
721x1440). The weights are torch's initialization under `seed`: an untrained model, the same
on every run, since the example is about the data path, not the model.

`predict` reads {"batches": [{"shape": [b, h, w], "data": [...]}, ...]} (float32 values, row
major) and writes {"outputs": [{"shape": [...], "data": [...]}, ...]}: each batch run as one
`InferenceSession.run`, its values written as float64, exact for float32.
"""

import argparse
import json
import sys


def build(channels, classes, stride, center, scale, seed):
    import torch
    from torch import nn

    class FieldClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.center, self.scale = center, scale
            self.conv = nn.Conv2d(1, channels, 3, stride=stride, padding=1)
            self.head = nn.Linear(channels, classes)

        def forward(self, x):
            x = (x - self.center) * self.scale
            h = torch.relu(self.conv(x.unsqueeze(1)))
            return torch.softmax(self.head(h.mean(dim=(2, 3))), dim=-1)

    torch.manual_seed(seed)
    return FieldClassifier().eval()


def export(a):
    import logging

    import torch

    # The exporter warns that torchvision's operators are not registered: this model has none.
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    model = build(a.channels, a.classes, a.stride, a.center, a.scale, a.seed)
    example = torch.full((2, 9, 10), a.center)
    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("lat"), 2: torch.export.Dim("lon")}
    program = torch.onnx.export(
        model, (example,), input_names=["x"], output_names=["probs"],
        dynamic_shapes=(dims,), dynamo=True, verbose=False,
    )
    program.save(a.out)
    print(f"wrote {a.out}: x float32 [batch, lat, lon] -> probs [batch, {a.classes}]", file=sys.stderr)


def predict(a):
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    req = json.load(sys.stdin)
    outputs = []
    for b in req["batches"]:
        x = np.asarray(b["data"], dtype=np.float32).reshape(b["shape"])
        (y,) = session.run(None, {inp.name: x})
        outputs.append({"shape": list(y.shape), "data": y.astype(np.float64).ravel().tolist()})
    json.dump({"outputs": outputs, "onnxruntime": ort.__version__}, sys.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="export the model to OUT.onnx")
    e.add_argument("out")
    e.add_argument("--channels", type=int, default=8)
    e.add_argument("--classes", type=int, default=4)
    e.add_argument("--stride", type=int, default=1)
    e.add_argument("--center", type=float, default=280.0)
    e.add_argument("--scale", type=float, default=0.1)
    e.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("predict", help="run MODEL.onnx on the batches of stdin's JSON")
    r.add_argument("model")
    a = p.parse_args()
    export(a) if a.cmd == "export" else predict(a)


if __name__ == "__main__":
    main()
