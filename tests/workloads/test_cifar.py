import io
import pickle
import tarfile

import numpy as np
import pytest

from gcbench.workloads import cifar


def test_batch_round_trip_keeps_pixels_channel_order_and_labels(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(5, 3, 32, 32), dtype=np.uint8)
    labels = np.array([0, 9, 3, 3, 7])
    cifar.write_batch(tmp_path / "data_batch_1", images, labels, "training batch 1 of 5")
    with open(tmp_path / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    assert raw[b"data"].shape == (5, 3072) and raw[b"data"].dtype == np.uint8
    assert raw[b"labels"] == [0, 9, 3, 3, 7]
    # row layout: 1024 red values, then green, then blue, row-major
    assert raw[b"data"][1, 1024 + 32 * 2 + 5] == images[1, 1, 2, 5]
    x, y = cifar.load_batch(tmp_path / "data_batch_1")
    np.testing.assert_array_equal(x, images)
    np.testing.assert_array_equal(y, labels)


def test_generated_dataset_loads_in_the_standard_layout(tmp_path):
    folder = cifar.generate(tmp_path, train_per_batch=20, test_size=30, seed=3)
    assert folder.name == "cifar-10-batches-py"
    assert sorted(p.name for p in folder.iterdir()) == [
        "batches.meta",
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
    ]
    x_train, y_train, x_test, y_test = cifar.load(tmp_path)
    assert x_train.shape == (100, 3, 32, 32) and y_train.shape == (100,)
    assert x_test.shape == (30, 3, 32, 32) and set(y_test) <= set(range(10))
    again = cifar.generate(tmp_path / "again", train_per_batch=20, test_size=30, seed=3)
    np.testing.assert_array_equal(cifar.load(again)[0], x_train)  # deterministic
    with open(folder / "batches.meta", "rb") as f:
        assert pickle.load(f, encoding="bytes")[b"label_names"][0] == b"airplane"


def test_malformed_batches_name_the_file(tmp_path):
    bad = tmp_path / "data_batch_1"
    with open(bad, "wb") as f:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, f)
    with pytest.raises(cifar.CifarFormatError, match="data_batch_1.*3072"):
        cifar.load_batch(bad)
    with open(bad, "wb") as f:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}, f)
    with pytest.raises(cifar.CifarFormatError, match="0..9"):
        cifar.load_batch(bad)
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        cifar.load(tmp_path / "empty")


def _archive(tmp_path):
    src = cifar.generate(tmp_path / "src", train_per_batch=4, test_size=4)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(src, arcname="cifar-10-batches-py")
    path = tmp_path / "cifar-10-python.tar.gz"
    path.write_bytes(buf.getvalue())
    return path


def test_download_checks_the_md5_before_extracting(tmp_path):
    archive = _archive(tmp_path)
    url = archive.as_uri()  # file:// stands in for the network
    with pytest.raises(ValueError, match="MD5"):
        cifar.download(tmp_path / "bad", url=url, md5="0" * 32)
    assert not (tmp_path / "bad" / "cifar-10-batches-py").exists()
    folder = cifar.download(tmp_path / "good", url=url, md5=cifar.file_md5(archive))
    assert cifar.load(folder)[0].shape == (20, 3, 32, 32)
