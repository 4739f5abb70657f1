"""CIFAR-10 in its standard python-pickle format: loading, download, and a generator.

Format (Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009;
https://www.cs.toronto.edu/~kriz/cifar.html, "Dataset layout / Python version"):
the folder ``cifar-10-batches-py`` holds ``data_batch_1`` .. ``data_batch_5`` (10,000
training images each), ``test_batch`` (10,000) and ``batches.meta``. Each batch is a
pickled dict (read with ``encoding="bytes"``, so keys are bytes):

* ``b'data'``: uint8 array [N, 3072]; each row is a 32x32 colour image, the 1024 red
  values first, then green, then blue, each channel in row-major order;
* ``b'labels'``: list of N ints in 0..9;
* ``b'batch_label'``, ``b'filenames'``: descriptive, unused here.

``batches.meta`` has ``b'label_names'`` (10 names) and ``b'num_cases_per_batch'``.

The archive ``cifar-10-python.tar.gz`` is downloaded only on request and checked
against its published MD5 (the checksum torchvision uses) before extraction.
Tests and the demo use :func:`generate`, which writes a small dataset in exactly this
format whose classes are separable (per-class colour and stripe pattern plus noise),
so accuracy above chance is reachable in a few steps.
"""

from __future__ import annotations

import hashlib
import pickle
import shutil
import tarfile
import urllib.request
from pathlib import Path

import numpy as np

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
LABEL_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
IMAGE_SHAPE = (3, 32, 32)

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
"""Per-channel mean and standard deviation of the CIFAR-10 training set (on [0, 1])."""


class CifarFormatError(ValueError):
    """A batch file is not in the CIFAR-10 python format (carries the path)."""

    def __init__(self, path: Path, message: str):
        self.path = Path(path)
        super().__init__(f"{path}: {message}")


def load_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file -> (images uint8 [N, 3, 32, 32], labels int64 [N]).

    Raises:
        CifarFormatError: missing keys, wrong sizes or labels outside 0..9.
        OSError: unreadable file.
    """
    path = Path(path)
    with open(path, "rb") as f:
        try:
            d = pickle.load(f, encoding="bytes")
        except (pickle.UnpicklingError, EOFError) as exc:
            raise CifarFormatError(path, f"not a pickle batch: {exc}") from None
    if not isinstance(d, dict) or b"data" not in d or b"labels" not in d:
        raise CifarFormatError(path, "a CIFAR batch is a dict with keys b'data' and b'labels'")
    data = np.asarray(d[b"data"], dtype=np.uint8)
    labels = np.asarray(d[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072:
        raise CifarFormatError(path, f"b'data' must be [N, 3072] uint8, got {list(data.shape)}")
    if labels.shape != (data.shape[0],):
        raise CifarFormatError(path, f"{labels.shape[0]} labels for {data.shape[0]} images")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise CifarFormatError(path, "labels must lie in 0..9")
    return data.reshape(-1, *IMAGE_SHAPE), labels


def write_batch(path: Path, images: np.ndarray, labels: np.ndarray, batch_label: str) -> None:
    """Write (uint8 [N, 3, 32, 32], int [N]) as one batch file in the CIFAR-10 format."""
    images = np.ascontiguousarray(images, dtype=np.uint8)
    if images.shape[1:] != IMAGE_SHAPE:
        raise ValueError(f"images must be [N, 3, 32, 32], got {list(images.shape)}")
    d = {
        b"batch_label": batch_label.encode(),
        b"labels": [int(x) for x in labels],
        b"data": images.reshape(len(images), 3072),
        b"filenames": [f"gen_{batch_label.replace(' ', '_')}_{i}.png".encode() for i in range(len(images))],
    }
    with open(path, "wb") as f:
        pickle.dump(d, f, protocol=2)


def load(root: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The dataset under ``root`` (the folder itself or its parent holding ``cifar-10-batches-py``).

    Returns:
        (x_train uint8 [N, 3, 32, 32], y_train int64 [N], x_test uint8 [M, 3, 32, 32],
        y_test int64 [M]).

    Raises:
        FileNotFoundError: a batch file is missing (names it).
        CifarFormatError: a batch is malformed.
    """
    folder = dataset_folder(root)
    xs, ys = [], []
    for name in TRAIN_BATCHES:
        x, y = load_batch(folder / name)
        xs.append(x)
        ys.append(y)
    x_test, y_test = load_batch(folder / TEST_BATCH)
    return np.concatenate(xs), np.concatenate(ys), x_test, y_test


def dataset_folder(root: Path) -> Path:
    """``root`` if it holds the batch files, else ``root / cifar-10-batches-py``.

    Raises:
        FileNotFoundError: neither holds ``data_batch_1``.
    """
    root = Path(root)
    for cand in (root, root / FOLDER):
        if (cand / TRAIN_BATCHES[0]).is_file():
            return cand
    raise FileNotFoundError(f"no CIFAR-10 batches ({TRAIN_BATCHES[0]}) in {root} or {root / FOLDER}")


def download(root: Path, url: str = URL, md5: str = ARCHIVE_MD5) -> Path:
    """Download and extract CIFAR-10 under ``root`` after checking the archive's MD5.

    Returns the batch folder. Does nothing when the batches are already there.

    Raises:
        ValueError: checksum mismatch (the archive is deleted).
        OSError / urllib.error.URLError: no network.
    """
    root = Path(root)
    try:
        return dataset_folder(root)
    except FileNotFoundError:
        pass
    root.mkdir(parents=True, exist_ok=True)
    archive = root / "cifar-10-python.tar.gz"
    tmp = archive.with_suffix(".part")
    with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as f:
        shutil.copyfileobj(resp, f, length=1 << 20)
    digest = file_md5(tmp)
    if digest != md5:
        tmp.unlink()
        raise ValueError(f"{url}: MD5 {digest} does not match the published {md5}")
    tmp.replace(archive)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(root, filter="data")
    return dataset_folder(root)


def file_md5(path: Path) -> str:
    """Hex MD5 of a file, read in 1 MiB chunks."""
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def synthetic_images(n: int, rng: np.random.Generator, colours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``n`` separable 32x32 images: class colour (``colours`` [10, 3]) + class stripes + noise."""
    labels = rng.integers(0, 10, size=n)
    base = np.asarray(colours, dtype=np.float32)
    yy, xx = np.mgrid[0:32, 0:32]
    images = np.empty((n, *IMAGE_SHAPE), dtype=np.uint8)
    for i, c in enumerate(labels):
        period = 4 + (c % 5) * 2
        stripes = ((xx if c < 5 else yy) // (period // 2)) % 2 * 60.0 - 30.0
        img = base[c][:, None, None] + stripes[None] + rng.normal(0, 20, size=IMAGE_SHAPE)
        images[i] = np.clip(img, 0, 255).astype(np.uint8)
    return images, labels


def generate(root: Path, train_per_batch: int = 64, test_size: int = 64, seed: int = 0) -> Path:
    """Write a small CIFAR-10-format dataset under ``root / cifar-10-batches-py``.

    Five training batches of ``train_per_batch`` images, one test batch of ``test_size``,
    and ``batches.meta``; deterministic for a given ``seed``. Returns the batch folder.
    """
    folder = Path(root) / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    # Class colours are drawn once so that train and test share them.
    colours = np.random.default_rng([seed, 99]).integers(40, 216, size=(10, 3))
    for i, name in enumerate(TRAIN_BATCHES, start=1):
        x, y = synthetic_images(train_per_batch, np.random.default_rng([seed, i]), colours)
        write_batch(folder / name, x, y, f"training batch {i} of 5")
    x, y = synthetic_images(test_size, np.random.default_rng([seed, 0]), colours)
    write_batch(folder / TEST_BATCH, x, y, "testing batch 1 of 1")
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(
            {
                b"label_names": [n.encode() for n in LABEL_NAMES],
                b"num_cases_per_batch": train_per_batch,
                b"num_vis": 3072,
            },
            f,
            protocol=2,
        )
    return folder
