"""The engine's index: what pairs and partitions the records, exact across files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.fixtures.sessions import write_fixtures
from wirediff.engine.engines import LocalEngine
from wirediff.engine.plan import partitions, root_digests
from wirediff.engine.progress import Progress
from wirediff.engine.run import scan_inputs
from wirediff.record.keys import digest


def test_a_replay_goes_back_to_its_original_whatever_file_it_is_in(tmp_path: Path) -> None:
    """An originals-only file (every `replay_digest` 0) and files of replays (64-bit
    digests) together: the digests stay exact, so each replay's root is its original's."""
    files = [str(p) for p in write_fixtures(tmp_path)]
    frame = scan_inputs(LocalEngine(1), files, Progress(False)).frame
    replays = frame["replay_of"].notna().to_numpy()
    assert replays.any() and not replays.all()
    expected = [digest(r) for r in frame.loc[replays, "replay_of"]]
    assert frame.loc[replays, "replay_digest"].tolist() == expected
    root = root_digests(frame)
    by_id = dict(zip(frame["id"].tolist(), frame["id_digest"].tolist(), strict=True))
    originals = [by_id[r] for r in frame.loc[replays, "replay_of"]]
    assert root[replays].tolist() == originals
    part = partitions(frame, 7)
    place = dict(zip(frame["id"].tolist(), part.tolist(), strict=True))
    assert [place[r] for r in frame.loc[replays, "replay_of"]] == part[replays].tolist()
    assert len(np.unique(part)) > 1
