"""``frt_dist.distribution.objstore``: locations, keys, and the five verbs, the same contract for every backend
(s3:// against a real moto server, file:// on disk). A new backend (GCS, Azure) joins ``store``."""

from __future__ import annotations

import base64
import hashlib
import io
import os

import pytest

from frt_dist.distribution.objstore import (
    Location,
    ObjectMissing,
    StoreAccess,
    lock_key,
    locked_file_key,
    object_key,
    open_store,
    parse_location,
    receipt_key,
)

HEX = hashlib.sha256(b"x").hexdigest()


def test_locations():
    assert parse_location("s3://my-bucket/frt/prod/") == Location("s3", bucket="my-bucket", prefix="frt/prod")
    assert parse_location("s3://my-bucket").url == "s3://my-bucket"
    assert parse_location("file:///srv/m") == Location("file", path="/srv/m")
    assert parse_location("some/dir") == Location("dir", path="some/dir") and not parse_location("d").is_store
    for bad, says in (("gs://b/p", "does not know the scheme 'gs'"), ("s3://Bad_Bucket/p", "not a bucket name"),
                      ("s3://bucket/a/../b", "not a plain name"), ("s3://bucket/.hidden", "not a plain name"),
                      ("file://host/x", "needs an absolute path")):
        with pytest.raises(StoreAccess, match=says) as exc:
            parse_location(bad)
        assert exc.value.exit_code == 2


def test_keys_come_from_digests_and_checked_names_only():
    raw = hashlib.sha256(b"x").digest()
    assert locked_file_key("sha256", base64.b64encode(raw).decode()) == f"sha256/{HEX}"
    assert locked_file_key("sha256", f"sha256:{HEX}") == f"sha256/{HEX}"
    assert locked_file_key("blake2b", base64.b64encode(b"\x01" * 32).decode()) == "blake2b/" + "01" * 32
    assert lock_key("demo-decoder") == "lockfiles/demo-decoder.lock" and receipt_key(HEX) == f"receipts/sha256/{HEX}.json"
    for bad in (("sha256", "../../x"), ("SHA/256", HEX), ("sha256", "zz")):
        with pytest.raises(ValueError):
            object_key(*bad)
    with pytest.raises(ValueError):
        locked_file_key("sha256", "not base64 !")


@pytest.fixture(params=["s3", "file"])
def store(request, tmp_path):
    if request.param == "s3":
        name = request.getfixturevalue("bucket")
        st = open_store(f"s3://{name}/some/prefix")
    else:
        st = open_store(f"file://{tmp_path / 'store'}")
    with st:
        yield st


@pytest.mark.subprocess
def test_the_five_verbs(store):
    key = f"sha256/{HEX}"
    assert store.head(key) is None and store.get_bytes(key) is None and store.list("sha256") == []
    with pytest.raises(ObjectMissing, match="no such object") as exc:
        store.get(key, io.BytesIO())
    assert exc.value.exit_code == 1 and exc.value.key == key and store.where(key) in str(exc.value)
    store.put_bytes(key, b"x" * 10)
    assert store.head(key) == 10 and store.get_bytes(key) == b"x" * 10
    out = io.BytesIO()
    assert store.get(key, out, limit=4) == 5 and out.getvalue() == b"xxxxx"  # stops one byte past the limit
    other = f"sha256/{'0' * 64}"
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"frt-objstore-test-{os.getpid()}")
    with open(path, "wb") as f:
        f.write(b"y" * (3 << 20))
    try:
        got = []
        store.put_file(other, path, progress=got.append)
    finally:
        os.unlink(path)
    assert sum(got) == 3 << 20  # progress reports every byte sent
    out = io.BytesIO()
    assert store.get(other, out) == 3 << 20 and out.getvalue() == b"y" * (3 << 20)
    assert store.list("sha256") == sorted([(key, 10), (other, 3 << 20)])
    store.put_bytes(key, b"z")  # replaced whole
    assert store.get_bytes(key) == b"z"
    with pytest.raises(ValueError):
        store.head("../outside")
