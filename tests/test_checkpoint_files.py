"""Checkpoint files treated as hostile (issue 29, point 5) and resumes that must be refused (point 6).

Each hostile file is refused with a CheckpointError within 1 second and 100 MB of memory (tracemalloc's peak:
numpy's and zlib's buffers are traced). The forged files carry digests recomputed as an attacker would (a SHA-256
is no signature), so that the parsers behind the digest are reached.
"""

from __future__ import annotations

import json
import os
import struct
import time
import tracemalloc
import warnings
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import privcvx as pc
from privcvx.errors import CheckpointError, PrivacyError
from privcvx.runtime import checkpoint as checkpoints

PRIVACY = pc.ObjectivePerturbation(pc.Laplace(1.0))


def _problem(seed: int = 0) -> pc.DistributedProblem:
    from problems.rendezvous import rendezvous

    return rendezvous(np.random.default_rng(seed).uniform(-1, 1, (3, 2)))


def _solve(problem: pc.DistributedProblem | None = None, algorithm: object = None, **options: object) -> pc.Result:
    options = {"rounds": 5, "seed": 1, **({"privacy": PRIVACY} if algorithm is None else {}), **options}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (problem or _problem()).solve(algorithm, **options)


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    path = tmp_path / "run.ckpt"
    _solve(rounds=3, checkpoint=path)
    return path


def _refused_fast(resume: Callable[[], object], match: str = "") -> None:
    """``resume()`` raises a CheckpointError within 1 s, its allocations peaking below 100 MB."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(CheckpointError, match=match):
            resume()
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 1.0, f"refused after {elapsed:.2f} s"
    assert peak < 100e6, f"peak allocation {peak / 1e6:.0f} MB"


def _members(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def _forged(path: Path, **members: np.ndarray) -> None:
    """Rewrite the state file at ``path`` with ``members`` replaced and its digest recomputed."""
    arrays = {**{k: v for k, v in _members(path).items() if k != "__digest__"}, **members}
    arrays["__digest__"] = np.frombuffer(checkpoints._digest(arrays).encode(), dtype=np.uint8)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def _text(value: object) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


def _state(path: Path) -> dict:
    return json.loads(bytes(_members(path)["__state__"]))


def _with_transcript(path: Path, records: list[bytes]) -> None:
    """Replace the transcript sidecar by ``records`` (its chain and size recorded in a forged state file)."""
    log = checkpoints.Log(checkpoints.transcript_path(path))
    log.append(records)
    state = _state(path)
    state["logs"]["transcript"] = log.position
    log.close()
    _forged(path, __state__=_text(state))


def _message(header: list, payload: bytes = b"") -> bytes:
    text = json.dumps([header]).encode()
    return struct.pack("<Q", len(text)) + text + payload


# ---- the transcript sidecar --------------------------------------------------------------------------------

@pytest.mark.parametrize("arrays", [[["x", "<f8", [-1]]], [["x", "|V8", [1000000000]]], [["x", "<f8", [2**40]]],
                                    [["x", "<U4", [1]]], [["x", "O", [1]]]],
                         ids=["shape-minus-one", "void-dtype", "huge-shape", "text-dtype", "object-dtype"])
def test_a_crafted_transcript_message_is_refused(checkpoint, arrays):
    record = _message([1, 0, "agent-0", None, arrays], payload=b"\0" * 16)
    _with_transcript(checkpoint, [record])
    _refused_fast(lambda: _solve(resume=checkpoint), match="transcript is damaged")


def test_a_transcript_sidecar_without_its_recorded_digest_is_refused(checkpoint):
    sidecar = checkpoints.transcript_path(checkpoint)
    content = bytearray(sidecar.read_bytes())
    content[-1] ^= 1  # one flipped bit of an array
    sidecar.write_bytes(bytes(content))
    _refused_fast(lambda: _solve(resume=checkpoint), match="records do not match the digest")


@pytest.mark.parametrize("sidecar", ["transcript", "log"])
def test_a_sidecar_symlinked_to_dev_zero_is_refused(checkpoint, sidecar):
    file = Path(f"{checkpoint}.{sidecar}")
    file.unlink()
    file.symlink_to("/dev/zero")
    _refused_fast(lambda: _solve(resume=checkpoint), match="symlink")


def test_resume_from_a_fifo_or_a_device_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.ckpt"
    os.mkfifo(fifo)
    _refused_fast(lambda: _solve(resume=fifo), match="not a regular file")
    _refused_fast(lambda: _solve(resume="/dev/zero"), match="not a regular file")


def test_no_checkpoint_file_is_written_through_a_symlink(tmp_path, checkpoint):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    for suffix in ("", ".transcript", ".log"):
        path = tmp_path / f"other.ckpt{suffix}"
        path.symlink_to(target)
        with pytest.raises(CheckpointError, match="symlink|not a regular file"):
            _solve(checkpoint=tmp_path / "other.ckpt")
        path.unlink()
    assert target.read_text() == "keep me"
    fifo = tmp_path / "fifo.ckpt.log"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match="not usable|not a regular file"):  # a FIFO without a reader
        _solve(checkpoint=tmp_path / "fifo.ckpt")


# ---- the state file: zip and npy ---------------------------------------------------------------------------

def _zip_bomb(path: Path) -> None:
    """A ~1 MB archive whose one member inflates to 1 GiB of zeros."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 24)
    block = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)  # byte-aligned, dictionary reset
    data = block * 64 + compressor.flush()  # so 64 copies inflate to 64 chunks
    size = 1 << 30
    crc = 0
    for _ in range(64):
        crc = zlib.crc32(chunk, crc)
    name = b"__state__.npy"
    header = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(data), size, len(name), 0) + name
    entry = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc, len(data), size, len(name), 0, 0,
                        0, 0, 0, 0) + name
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(entry), len(header) + len(data), 0)
    path.write_bytes(header + data + entry + end)


def _patched(source: Path, target: Path, member: str, local_offset: int, central_offset: int, value: int) -> None:
    """A copy of the archive with a 16-bit field of ``member``'s local and central headers set to ``value``."""
    content = bytearray(source.read_bytes())
    name = member.encode()
    for signature, offset in ((b"PK\x03\x04", local_offset), (b"PK\x01\x02", central_offset)):
        at = content.index(signature + b"", 0)
        while True:
            name_start = at + (30 if signature == b"PK\x03\x04" else 46)
            if content[name_start:name_start + len(name)] == name:
                break
            at = content.index(signature, at + 4)
        struct.pack_into("<H", content, at + offset, value)
    target.write_bytes(bytes(content))


def _with_member(source: Path, target: Path, name: str, content: bytes) -> None:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            new.writestr(info.filename, content if info.filename == name else old.read(info))
        if name not in old.namelist():
            new.writestr(name, content)


def _npy(header: str) -> bytes:
    text = header.encode().ljust(118) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + b"\0" * 16


HOSTILE_ARCHIVES: dict[str, Callable[[Path, Path], None]] = {
    "zip-bomb": lambda good, path: _zip_bomb(path),
    "encrypted-flag": lambda good, path: _patched(good, path, "__state__.npy", 6, 8, 0x1),
    "unknown-compression": lambda good, path: _patched(good, path, "__state__.npy", 8, 10, 77),
    "deflate-not-stored": lambda good, path: _patched(good, path, "__header__.npy", 8, 10, zipfile.ZIP_DEFLATED),
    "damaged-npy-header": lambda good, path: _with_member(good, path, "__state__.npy",
                                                          _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2")),
    "npy-header-not-a-dict": lambda good, path: _with_member(good, path, "__state__.npy", _npy("[1, 2, 3]")),
    "npy-shape-minus-one": lambda good, path: _with_member(
        good, path, "__state__.npy", _npy("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }")),
    "npy-void-dtype": lambda good, path: _with_member(
        good, path, "__state__.npy", _npy("{'descr': '|V8', 'fortran_order': False, 'shape': (2,), }")),
    "npy-object-dtype": lambda good, path: _with_member(
        good, path, "__state__.npy", _npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }")),
    "npy-bad-magic": lambda good, path: _with_member(good, path, "__state__.npy", b"\x80\x04garbage"),
    "npy-huge-header-length": lambda good, path: _with_member(good, path, "__state__.npy",
                                                              b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**31)),
    "unexpected-member-name": lambda good, path: _with_member(good, path, "../../escape.npy", _npy("")),
    "not-a-zip": lambda good, path: path.write_bytes(b"PK\x03\x04" + os.urandom(2000)),
    "truncated": lambda good, path: path.write_bytes(good.read_bytes()[:300]),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_ARCHIVES))
def test_a_hostile_state_file_is_refused_fast(checkpoint, tmp_path, kind):
    hostile = tmp_path / "hostile.ckpt"
    HOSTILE_ARCHIVES[kind](checkpoint, hostile)
    _refused_fast(lambda: _solve(resume=hostile), match="not a privcvx checkpoint")


@pytest.mark.parametrize("header", [[1, 2, 3], "text", None])
def test_a_header_that_is_not_an_object_is_refused(checkpoint, header):
    _forged(checkpoint, __header__=_text(header))
    _refused_fast(lambda: _solve(resume=checkpoint), match="damaged header")


@pytest.mark.parametrize("change", [{"next_round": 10**9}, {"next_round": 0}, {"next_round": True},
                                    {"agents": "x"}, {"monitor": [1]}, {"logs": {}},
                                    {"router": {"receivers": ["agent-0"], "sent": [999]}},
                                    {"router": {"receivers": ["agent-0"], "sent": [-1]}}],
                         ids=["far-future", "zero", "bool", "agents", "monitor", "logs", "router-index",
                              "router-negative-index"])
def test_a_forged_state_is_refused(checkpoint, change):
    state = _state(checkpoint)
    state.update(change)
    _forged(checkpoint, __state__=_text(state))
    _refused_fast(lambda: _solve(resume=checkpoint), match="round|damaged|edited")


def test_stale_temporary_files_are_removed_when_a_checkpointed_run_starts(checkpoint, tmp_path):
    stale = tmp_path / ".run.ckpt.abc123.tmp"  # what a kill inside write_atomically leaves
    stale.write_bytes(b"partial")
    _solve(rounds=4, resume=checkpoint, checkpoint=checkpoint)
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt", "run.ckpt.log", "run.ckpt.transcript"]


# ---- resumes that must be refused (point 6) ----------------------------------------------------------------

def test_resume_refuses_another_diagnostics_setting_and_compares_seeds_by_value(tmp_path):
    path = tmp_path / "run.ckpt"
    full = _solve(rounds=6)
    _solve(rounds=6, checkpoint=path, callback=lambda row: row["round"] < 3)
    with pytest.raises(CheckpointError, match="another run.*diagnostics"):
        _solve(rounds=6, resume=path, diagnostics=False)
    resumed = _solve(rounds=6, resume=path, seed=np.int64(1))  # the same seed, by value
    assert np.array_equal(full.w, resumed.w) and full.transcript.same_as(resumed.transcript)
    with pytest.raises(CheckpointError, match="another run.*seed"):
        _solve(rounds=6, resume=path, seed=np.int64(2))


def test_resume_refuses_another_rounds_when_the_noise_is_calibrated_to_them(tmp_path):
    problem = _problem()
    algorithm = pc.algorithms.PRADMM(epsilon=1.0)
    path = tmp_path / "run.ckpt"
    _solve(problem, algorithm, rounds=10, checkpoint=path, callback=lambda row: row["round"] < 4)
    with pytest.raises(CheckpointError, match="another run.*rounds: the file has 10, this run has 20"):
        _solve(problem, algorithm, rounds=20, resume=path)
    assert len(_solve(problem, algorithm, rounds=10, resume=path).history) == 10
    # A method whose round t does not look at T extends: ObjPert with a per-update mechanism.
    _solve(rounds=3, checkpoint=path)
    assert len(_solve(rounds=5, resume=path).history) == 5
    with pytest.raises(CheckpointError, match="round 4, which a run of rounds=2 does not have"):
        _solve(rounds=2, resume=path)


def test_resume_refuses_other_declarations_than_the_noise_was_calibrated_to(tmp_path):
    """The agents' pc.Declared records are in the checkpoint header: resuming after one agent's declared bound
    changed (the same data, another calibration) is refused; the same records resume."""
    problem, path = _problem(), tmp_path / "run.ckpt"
    algorithm = pc.algorithms.PRADMM(epsilon=1.0)
    _solve(problem, algorithm, rounds=6, checkpoint=path, callback=lambda row: row["round"] < 3)
    assert len(_solve(_problem(), algorithm, rounds=6, resume=path).history) == 6
    looser = _problem()
    looser.agents[1].sensitivity = looser.agents[1].sensitivity.scaled(2.0)
    with pytest.raises(CheckpointError, match="another run.*declared"):
        _solve(looser, algorithm, rounds=6, resume=path)


def test_a_secure_run_refuses_a_checkpoint_before_any_work(tmp_path):
    with pytest.raises(PrivacyError, match="secure noise cannot be checkpointed"):
        _problem().solve(rounds=3, privacy=PRIVACY, checkpoint=tmp_path / "run.ckpt")
    assert list(tmp_path.iterdir()) == []


# ---- the state's tables (format 4) -------------------------------------------------------------------------

def test_a_state_of_many_agents_is_stored_as_tables_and_read_back_exactly(tmp_path):
    """Values of one structure (every agent's state, the monitor's releases, undelivered Messages) become a table:
    one stacked array per array field, one list per other field; reading gives back the same types and bits (0-d
    arrays stay arrays, tuples become lists as in JSON), and values that differ in structure stay as they are."""
    from privcvx.messages import Message

    rng = np.random.default_rng(0)
    state = {
        "agents": [{"program": {"x": rng.normal(size=3), "rho": np.array(0.5 + p), "k": np.arange(2, dtype=np.int32)},
                    "noise": {"state": hex(2**100 + p), "count": p, "nan": float("nan")}} for p in range(50)],
        "latest": {f"agent-{p}": rng.normal(size=(2, 2)) for p in range(50)},
        "messages": [Message(round=7, sender=f"agent-{p}", receiver=None if p % 2 else "agent-0",
                             payload={"y": rng.normal(size=2)}) for p in range(50)],
        "mixed": [rng.normal(size=2), rng.normal(size=3), {"a": 1}, (1, 2), 4.0],
        "pairs": [(1, "a"), (2, "b"), (3, "c"), (4, "d")],
        "empty": [{}, {}, {}, {}],
    }
    header = {"format": checkpoints.FORMAT_VERSION}
    data = checkpoints.encode_state(header, state)
    path = tmp_path / "state.ckpt"
    path.write_bytes(data)
    text = json.dumps(json.loads(bytes(_members(path)["__state__"])))
    assert text.count("\\u0000array") == 7  # x, rho, k, latest, y: stacked; the two arrays of "mixed" as they are
    back = checkpoints.read_state(path, header)

    def same(a: object, b: object) -> None:
        if isinstance(a, dict):
            assert type(b) is dict and list(a) == list(b)
            for key in a:
                same(a[key], b[key])
        elif isinstance(a, list | tuple):
            assert type(b) is list and len(a) == len(b)
            for x, y in zip(a, b, strict=True):
                same(x, y)
        elif isinstance(a, np.ndarray):
            assert type(b) is np.ndarray and (a.dtype, a.shape) == (b.dtype, b.shape) and a.tobytes() == b.tobytes()
            assert b.flags.writeable
        elif isinstance(a, Message):
            assert type(b) is Message and (a.round, a.phase, a.sender, a.receiver) == (b.round, b.phase, b.sender,
                                                                                      b.receiver)
            same(dict(a.payload), dict(b.payload))
        else:
            assert type(a) is type(b) and (a == b or a != a and b != b)

    same(state, back)
    back["agents"][0]["program"]["x"][:] = 0.0  # a row of a stacked array is its own value
    assert np.array_equal(back["agents"][1]["program"]["x"], state["agents"][1]["program"]["x"])


TABLE = "\0table"


@pytest.mark.parametrize("table", [
    [10**9, ["d", []]],  # a billion empty dicts from a few bytes
    [10**6, ["l", [["d", []], ["d", []]]]],
    [3, ["v", [1, 2]]],  # a column shorter than the rows
    [2, ["a", {"\0array": ["<f8", [3, 2]]}]],  # an array column of three rows for two
    [2, ["x", [1, 2]]],  # no such column
    [["a", 7], ["v", [1, 2]]],  # a key that is not a string
], ids=["billion-rows", "million-rows-of-pairs", "short-column", "array-rows", "unknown-column", "number-key"])
def test_a_forged_table_is_refused_fast(checkpoint, table):
    state = _state(checkpoint)
    state["monitor"] = {TABLE: table}
    _forged(checkpoint, __state__=_text(state))
    _refused_fast(lambda: _solve(resume=checkpoint), match="damaged")


def test_a_checkpoint_of_an_older_format_is_refused_naming_its_format(checkpoint):
    header = json.loads(bytes(_members(checkpoint)["__header__"]))
    header["format"] = checkpoints.FORMAT_VERSION - 1
    _forged(checkpoint, __header__=_text(header))
    _refused_fast(lambda: _solve(resume=checkpoint),
                  match=f"checkpoint of format {checkpoints.FORMAT_VERSION - 1}; this privcvx reads format "
                        f"{checkpoints.FORMAT_VERSION} only")


def test_a_program_state_its_method_cannot_take_is_a_checkpoint_error_naming_the_agent(tmp_path, monkeypatch):
    """A checkpoint of an older version of a method (RandomizedADMM's secret-sharing state moved to the key "secure";
    its load_state_dict then raised KeyError) is refused as a CheckpointError naming the agent, not a raw KeyError
    wrapped as the agent's failure. Mimicked here by a DPDG program that no longer finds its key "y"."""
    from privcvx.algorithms.dp_gradient import DPDGAgent

    problem, path = _problem(), tmp_path / "run.ckpt"
    algorithm = pc.algorithms.DPDistributedGradient(epsilon=1.0)
    _solve(problem, algorithm, rounds=6, checkpoint=path, callback=lambda row: row["round"] < 3)
    original = DPDGAgent.load_state_dict
    monkeypatch.setattr(DPDGAgent, "load_state_dict",
                        lambda self, state: original(self, {k: v for k, v in state.items() if k != "y"}))
    with pytest.raises(CheckpointError, match="does not fit its program.*KeyError") as raised:
        _solve(problem, algorithm, rounds=6, resume=path)
    assert raised.value.agent == problem.names[0] and raised.value.argument == "resume"
