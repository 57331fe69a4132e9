"""`make demo`: import the bundled example model, run it on the reference
interpreter (checked against onnxruntime), compile it for the accelerator and run
it on the instruction-set simulator (checked against the reference, with the
performance summary).

The example is a small residual CNN (conv, batch norm, relu, pooling, a skip
connection, global pooling and a classifier), written as ONNX by
`build_demo_model` with fixed-seed weights, so no download is needed. When the
compiler cannot lower it yet, the demo says so (naming the failing stage) and
shows the accelerator path on a bundled MLP that does lower
(`build_demo_mlp`), so the output always states what ran where.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np


def build_demo_model(path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name: str, *shape: int, scale: float = 0.2) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    def bn(prefix: str, c: int) -> list[onnx.TensorProto]:
        return [
            numpy_helper.from_array((1 + 0.1 * rng.standard_normal(c)).astype(np.float32), f"{prefix}.scale"),
            numpy_helper.from_array((0.1 * rng.standard_normal(c)).astype(np.float32), f"{prefix}.bias"),
            numpy_helper.from_array((0.1 * rng.standard_normal(c)).astype(np.float32), f"{prefix}.mean"),
            numpy_helper.from_array((1 + 0.1 * rng.random(c)).astype(np.float32), f"{prefix}.var"),
        ]

    inits = [init("stem.w", 16, 3, 3, 3), *bn("stem.bn", 16), init("b1.w", 16, 16, 3, 3), *bn("b1.bn", 16),
             init("b2.w", 16, 16, 3, 3), *bn("b2.bn", 16), init("fc.w", 10, 16), init("fc.b", 10, scale=0.1)]

    def bn_node(x: str, prefix: str, y: str):
        return helper.make_node("BatchNormalization", [x, f"{prefix}.scale", f"{prefix}.bias", f"{prefix}.mean",
                                                       f"{prefix}.var"], [y], name=f"{prefix}")

    nodes = [
        helper.make_node("Conv", ["image", "stem.w"], ["s0"], name="stem.conv", pads=[1, 1, 1, 1], strides=[2, 2]),
        bn_node("s0", "stem.bn", "s1"),
        helper.make_node("Relu", ["s1"], ["s2"], name="stem.relu"),
        helper.make_node("MaxPool", ["s2"], ["p0"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p0", "b1.w"], ["c1"], name="b1.conv", pads=[1, 1, 1, 1]),
        bn_node("c1", "b1.bn", "c2"),
        helper.make_node("Relu", ["c2"], ["c3"], name="b1.relu"),
        helper.make_node("Conv", ["c3", "b2.w"], ["c4"], name="b2.conv", pads=[1, 1, 1, 1]),
        bn_node("c4", "b2.bn", "c5"),
        helper.make_node("Add", ["c5", "p0"], ["r0"], name="residual"),
        helper.make_node("Relu", ["r0"], ["r1"], name="b2.relu"),
        helper.make_node("GlobalAveragePool", ["r1"], ["g0"], name="gap"),
        helper.make_node("Flatten", ["g0"], ["f0"], name="flatten"),
        helper.make_node("Gemm", ["f0", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "demo_resnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def build_demo_mlp(path: Path) -> Path:
    """A 3-layer perceptron classifier (8x64 -> 128 -> 64 -> 10, biases, ReLU/GELU-free)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    dims = [64, 128, 64, 10]
    inits, nodes, x = [], [], "features"
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"fc{i}.w"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(b)).astype(np.float32), f"fc{i}.b")]
        nodes += [helper.make_node("MatMul", [x, f"fc{i}.w"], [f"m{i}"], name=f"fc{i}"),
                  helper.make_node("Add", [f"m{i}", f"fc{i}.b"], [f"a{i}"], name=f"fc{i}.bias")]
        x = f"a{i}"
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
    nodes[-1].output[0] = "logits"
    graph = helper.make_graph(nodes, "demo_mlp", [helper.make_tensor_value_info("features", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [8, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _accelerator(step: int, model_path: Path, inputs: dict[str, np.ndarray], out: Path, target: str = "edge") -> bool:
    """Compile for the accelerator, save/load the artifact, run on the simulator, check, report."""
    import infer
    from infer.runtime.check import check

    t0 = time.perf_counter()
    exe = infer.compile(model_path, target=target)
    art = exe.save(out / (model_path.stem + ".npu"))
    print(f"{step}. compiled for '{target}' in {time.perf_counter() - t0:.2f} s: {art} ({art.stat().st_size} bytes; "
          f"{len(exe.program)} instructions, {exe.layout.total_bytes} bytes of DRAM)")
    exe = infer.load(art)
    arrays = [inputs[n] for n in exe.input_names]
    t0 = time.perf_counter()
    outs = exe.run(arrays)
    print(f"{step + 1}. ran on the instruction-set simulator in {time.perf_counter() - t0:.3f} s (host time): "
          f"{exe.output_names[0]}[0] {np.round(outs[0].reshape(outs[0].shape[0], -1)[0][:10], 4)}")
    results = check(exe.artifact, arrays, outs, exe.reference)
    print(f"{step + 2}. check against the reference interpreter:")
    for r in results:
        print("   " + r.line())
    print(f"{step + 3}. " + exe.last_report.summary().replace("\n", "\n   "))
    return all(r.ok() for r in results)


def main() -> int:
    import onnxruntime

    import infer

    out = Path("out/demo")
    model_path = build_demo_model(out / "demo_resnet.onnx")
    print(f"1. bundled example: {model_path} (small residual CNN, 1x3x32x32 -> 10 logits)")

    t0 = time.perf_counter()
    model = infer.import_model(model_path)
    ir_path = model.save(out / "demo_resnet.mlir")
    print(f"2. imported to graph-level IR in {time.perf_counter() - t0:.2f} s: {ir_path} "
          f"({ir_path.stat().st_size} bytes of text; weights beside it)")
    print("\n".join("   " + line for line in str(model).splitlines()[:12]))
    print("   ...")

    image = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    t0 = time.perf_counter()
    (logits,) = model.run({"image": image})
    print(f"3. reference interpreter ran in {time.perf_counter() - t0:.3f} s: logits {np.round(logits[0], 4)}")

    session = onnxruntime.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"image": image})
    err = float(np.max(np.abs(logits - expected)))
    scale = float(np.max(np.abs(expected))) or 1.0
    ok = err <= 1e-4 * max(1.0, scale)
    print(f"4. check against onnxruntime: max abs error {err:.2e} ({'OK' if ok else 'MISMATCH'}); "
          f"top-1 class {int(np.argmax(logits))} vs {int(np.argmax(expected))}")

    print("\naccelerator path (compile-npu -> .npu artifact -> simulator):")
    try:
        acc_ok = _accelerator(5, model_path, {"image": image}, out)
    except Exception as e:  # the compiler cannot lower this model yet: say where, then show the path on the MLP
        msg = " ".join(str(e).split())
        print(f"5. the compiler cannot lower {model_path.name} yet: {type(e).__name__}: {msg[:300]}")
        print("   (the CNN above ran on the reference interpreter only)")
        mlp_path = build_demo_mlp(out / "demo_mlp.onnx")
        print(f"6. instead, the bundled MLP: {mlp_path} (8x64 -> 128 -> 64 -> 10)")
        features = np.random.default_rng(3).standard_normal((8, 64)).astype(np.float32)
        acc_ok = _accelerator(7, mlp_path, {"features": features}, out)
    return 0 if ok and acc_ok else 1


if __name__ == "__main__":
    sys.exit(main())
