"""``solve(transcript="memory" | "disk" | "none")``: the same run, its messages kept in memory, streamed to a file,
or dropped; the history, the average and the privacy table do not depend on it."""

from __future__ import annotations

import os
import stat
import warnings

import numpy as np
import pandas as pd
import pytest

import privcvx as pc
from privcvx.messages import DroppedTranscript, TranscriptFile


def _solve(**options):  # noqa: ANN003, ANN202
    from problems.rendezvous import rendezvous

    problem = rendezvous(np.random.default_rng(5).uniform(-1, 1, (4, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return problem.solve(pc.algorithms.DPDistributedGradient(epsilon=1.0), pc.Topology.ring(), rounds=12,
                             seed=3, diagnostics=False, **options)


def test_disk_and_none_transcripts_change_nothing_but_where_the_messages_are(tmp_path):
    memory = _solve()
    disk = _solve(transcript="disk", transcript_path=tmp_path / "run.transcript")
    dropped = _solve(transcript="none")
    assert isinstance(disk.transcript, TranscriptFile) and isinstance(dropped.transcript, DroppedTranscript)
    assert len(memory.transcript) == 4 * 13 and disk.transcript.same_as(memory.transcript)  # bitwise, in order
    assert disk.transcript[-1].same_as(memory.transcript[-1]) and disk.transcript.round(3) and \
        all(a.same_as(b) for a, b in zip(disk.transcript.round(3), memory.transcript.round(3), strict=True))
    assert len(dropped.transcript) == 0 and dropped.transcript.sent == len(memory.transcript)
    for other in (disk, dropped):
        pd.testing.assert_frame_equal(other.history, memory.history)
        pd.testing.assert_frame_equal(other.privacy, memory.privacy)
        np.testing.assert_array_equal(other.average().w, memory.average().w)
        np.testing.assert_array_equal(other.w, memory.w)
    assert stat.S_IMODE(os.stat(tmp_path / "run.transcript").st_mode) == 0o600
    disk.save(tmp_path / "result.npz")  # a disk transcript is saved like one in memory
    assert pc.load_result(tmp_path / "result.npz").transcript.same_as(memory.transcript)


def test_the_transcript_file_never_follows_a_link_nor_overwrites_a_file(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    os.symlink(target, tmp_path / "link")
    for path in (tmp_path / "link", target):
        with pytest.raises(pc.errors.ParameterError, match="transcript_path"):
            _solve(transcript="disk", transcript_path=path)
    assert target.read_bytes() == b"keep me"


@pytest.mark.parametrize("options, argument", [
    ({"transcript": "disk"}, "transcript_path"),
    ({"transcript": "file"}, "transcript"),
    ({"transcript": ["memory"]}, "transcript"),
    ({"transcript_path": "x"}, "transcript_path"),
    ({"transcript": "none", "checkpoint": "run.ckpt"}, "transcript"),
])
def test_transcript_options_are_checked(options, argument, tmp_path):
    with pytest.raises(pc.errors.ParameterError) as info:
        _solve(**options)
    assert info.value.argument == argument
