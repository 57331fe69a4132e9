"""numpy <-> builtin dense attributes (`infer.dialects.dtypes.dense_attr` / `dense_to_numpy`),
the one pair every frontend, pass and interpreter uses: checked against the bytes xDSL's own
parser writes for the same literal."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, BytesAttr, DenseIntOrFPElementsAttr
from xdsl.parser import Parser
from xdsl.printer import Printer

from infer.dialects.dtypes import (
    SUPPORTED_ELEMENT_TYPES,
    dense_attr,
    dense_to_numpy,
    parse_element_type,
    tensor_type,
    to_numpy_dtype,
)


def _parse(text: str) -> DenseIntOrFPElementsAttr:
    ctx = Context()
    ctx.load_dialect(Builtin)
    attr = Parser(ctx, text).parse_attribute()
    assert isinstance(attr, DenseIntOrFPElementsAttr)
    return attr


def _print(attr: DenseIntOrFPElementsAttr) -> str:
    import io

    stream = io.StringIO()
    Printer(stream=stream).print_attribute(attr)
    return stream.getvalue()


def _sample(name: str) -> np.ndarray:
    dtype = to_numpy_dtype(parse_element_type(name))
    if name in ("i4", "ui4", "i2", "ui2"):  # ml_dtypes' narrow integers (not np.integer)
        info = ml_dtypes.iinfo(dtype)
        return np.array([[0, 1, int(info.max)], [int(info.min), int(info.max) - 1, 1]]).astype(dtype)
    if name == "f8E8M0FNU":  # powers of two only (no sign, no zero)
        return np.array([[0.5, 1.0, 2.0], [2.0**-20, 2.0**100, 0.125]]).astype(dtype)
    if dtype == np.bool_:
        return np.array([[True, False, True], [False, False, True]])
    if np.issubdtype(dtype, np.unsignedinteger):
        return np.array([[0, 1, 200], [7, 128, 255]]).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return np.array([[0, -1, 100], [-128, 127, 5]]).astype(dtype)
    return np.array([[0.5, -1.25, 3.0], [-0.0, 1e-3, 100.0]]).astype(dtype)


@pytest.mark.parametrize("name", SUPPORTED_ELEMENT_TYPES)
def test_every_element_type_round_trips_through_text(name: str) -> None:
    array = _sample(name)
    attr = dense_attr(array)
    assert attr.type == tensor_type(array.shape, array.dtype)
    back = dense_to_numpy(attr)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == array.tobytes()
    # The printed literal parses to the same bytes: what the parser writes is what dense_attr writes.
    reparsed = _parse(_print(attr))
    assert reparsed.data.data == attr.data.data
    assert dense_to_numpy(reparsed).tobytes() == array.tobytes()


@pytest.mark.parametrize("name", SUPPORTED_ELEMENT_TYPES)
def test_zero_d_stays_zero_d(name: str) -> None:
    array = _sample(name).reshape(-1)[1].reshape(())
    back = dense_to_numpy(dense_attr(array))
    assert back.shape == () and back.dtype == array.dtype and back.tobytes() == array.tobytes()


def test_raw_data_is_little_endian() -> None:
    attr = _parse("dense<[1, 258]> : tensor<2xi16>")
    assert attr.data.data == b"\x01\x00\x02\x01"
    np.testing.assert_array_equal(dense_to_numpy(attr), np.array([1, 258], np.int16))
    assert dense_attr(np.array([1, 258], np.int16)).data.data == b"\x01\x00\x02\x01"
    # big-endian bytes of a numpy array are stored little-endian as well
    big = np.array([1.5, -2.0], dtype=">f4")
    raw = DenseIntOrFPElementsAttr(tensor_type((2,), np.float32), BytesAttr(big.astype("<f4").tobytes()))
    np.testing.assert_array_equal(dense_to_numpy(raw), np.array([1.5, -2.0], np.float32))


def test_bool_is_one_byte_and_any_nonzero_byte_is_true() -> None:
    parsed = _parse("dense<[true, false, true]> : tensor<3xi1>")
    assert parsed.data.data == b"\xff\x00\xff"
    np.testing.assert_array_equal(dense_to_numpy(parsed), [True, False, True])
    assert dense_attr(np.array([True, False, True])).data.data == parsed.data.data
    ones = DenseIntOrFPElementsAttr(tensor_type((3,), np.bool_), BytesAttr(b"\x01\x00\x02"))
    np.testing.assert_array_equal(dense_to_numpy(ones), [True, False, True])


def test_bf16_reads_the_raw_bits() -> None:
    attr = _parse("dense<[1.5, -2.0, 3.140625]> : tensor<3xbf16>")
    expected = np.array([1.5, -2.0, 3.140625], dtype=ml_dtypes.bfloat16)
    assert attr.data.data == expected.tobytes()
    back = dense_to_numpy(attr)
    assert back.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(back.astype(np.float32), expected.astype(np.float32))


def test_splat() -> None:
    attr = dense_attr(np.full((2, 3), 7, np.int32), splat=True)
    assert len(attr.data.data) == 4
    assert _print(attr).startswith("dense<7>")
    np.testing.assert_array_equal(dense_to_numpy(attr), np.full((2, 3), 7, np.int32))
    # -0.0 and 0.0 differ bitwise: not a splat
    mixed = np.array([0.0, -0.0], np.float32)
    assert len(dense_attr(mixed, splat=True).data.data) == 8
    one_element = DenseIntOrFPElementsAttr(tensor_type((2, 2), np.bool_), BytesAttr(b"\xff"))
    np.testing.assert_array_equal(dense_to_numpy(one_element), np.ones((2, 2), np.bool_))


def test_wrong_element_count_is_an_error() -> None:
    attr = DenseIntOrFPElementsAttr(tensor_type((3,), np.int32), BytesAttr(b"\x00" * 8))
    with pytest.raises(ValueError, match="holds 2 elements for shape 3"):
        dense_to_numpy(attr)
