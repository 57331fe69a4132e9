"""Real weights, real data: a small CNN trained here on scikit-learn's bundled digits (8x8
images, no download) keeps its held-out top-1 accuracy within 0.5 points of fp32 after int8
quantization, on the reference interpreter (every conv and linear an integer kernel)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import infer
from infer.dialects import graph as g


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny net: one thread is fastest on a shared machine
    try:
        data = load_digits()
        images = (data.images / 16.0).astype(np.float32)[:, None]
        order = np.random.default_rng(0).permutation(len(images))
        test, train = order[:360], order[360:]
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(32 * 4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        opt = torch.optim.Adam(net.parameters(), 3e-3)
        xs, ys = torch.from_numpy(images[train]), torch.from_numpy(data.target[train])
        for _ in range(15):
            for batch in torch.randperm(len(xs)).split(64):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(xs[batch]), ys[batch]).backward()
                opt.step()
        net.eval()
        with torch.no_grad():
            torch_pred = net(torch.from_numpy(images[test])).argmax(1).numpy()
    finally:
        torch.set_num_threads(threads)
    return net, images, data.target, train, test, torch_pred


def test_digits_cnn_int8_keeps_its_accuracy(digits) -> None:
    net, images, labels, train, test, torch_pred = digits
    model = infer.import_model(net, (torch.from_numpy(images[test]),))  # the held-out split, one batch
    fp32 = model.run([images[test]])[0].argmax(1)
    np.testing.assert_array_equal(fp32, torch_pred)
    acc_fp32 = float(np.mean(fp32 == labels[test]))
    assert acc_fp32 > 0.95  # trained for real

    calibration = {"input": images[train[:720]].reshape(2, 360, 1, 8, 8)}  # two batches of training images
    qmodel, report = infer.quantize(model, calibration)
    int8 = qmodel.run([images[test]])[0].argmax(1)
    acc_int8 = float(np.mean(int8 == labels[test]))
    assert acc_int8 >= acc_fp32 - 0.005, (acc_fp32, acc_int8)

    ops = [op.name for op in qmodel.module.walk() if isinstance(op, g.GraphOp)]
    assert ops.count("graph.conv2d_integer") == 3 and ops.count("graph.linear_integer") == 2
    assert "graph.conv2d" not in ops and "graph.linear" not in ops and "graph.batch_norm" not in ops
    assert report.float_layers == [] and report.all_int8_cosine > 0.999
    print(f"digits: fp32 {acc_fp32:.4f}, int8 {acc_int8:.4f}, logits cosine {report.cosine:.6f}, "
          f"SQNR {report.sqnr_db:.1f} dB")


def _int8_on_the_simulator(digits, target: str, images_used: int, calibration_images: int, method: str):
    """The digits CNN quantized (calibrated on training images), compiled for `target`
    with `--precision int8` (every conv and linear an int8 kernel on the NPU), run on the
    simulator over `images_used` held-out images in batches of 8: (simulated, reference int8
    interpreter, labels)."""
    net, images, labels, train, test, _ = digits
    batch = 8  # float max_pool2d on the server config fails to encode for batches >= 12 (a pooling DMA box)
    calibration = infer.calibrate(infer.import_model(net, (torch.from_numpy(images[test[:calibration_images // 2]]),)),
                                  {"input": images[train[:calibration_images]].reshape(2, -1, 1, 8, 8)}, method)
    qmodel, report = infer.quantize(infer.import_model(net, (torch.from_numpy(images[test[:batch]]),)), calibration)
    assert report.float_layers == []
    exe = infer.compile(qmodel.module, target=target, precision="int8")
    assert exe.artifact.precision == "int8"
    simulated, reference = [], []
    for i in range(0, images_used, batch):
        x = images[test[i:i + batch]]
        simulated.append(exe.run([x])[0])
        reference.append(qmodel.run([x])[0])
    return np.concatenate(simulated), np.concatenate(reference), labels[test[:images_used]]


@pytest.mark.parametrize("target", ["edge", "server"])
def test_digits_cnn_int8_on_the_simulator_is_the_reference(digits, target) -> None:
    simulated, reference, _ = _int8_on_the_simulator(digits, target, 32, 64, "minmax")
    np.testing.assert_array_equal(simulated, reference)  # bit for bit


@pytest.mark.slow
@pytest.mark.parametrize("target", ["edge", "server"])
def test_digits_cnn_int8_on_the_simulator_keeps_its_accuracy(digits, target) -> None:
    net, images, labels, _, test, _ = digits
    simulated, reference, held_out = _int8_on_the_simulator(digits, target, len(test), 720, "entropy")
    np.testing.assert_array_equal(simulated, reference)
    fp32 = net(torch.from_numpy(images[test])).argmax(1).numpy()
    acc_fp32, acc_int8 = float(np.mean(fp32 == held_out)), float(np.mean(simulated.argmax(1) == held_out))
    assert acc_int8 >= acc_fp32 - 0.005, (acc_fp32, acc_int8)
