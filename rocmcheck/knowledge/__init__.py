"""What rocmcheck knows about failures, kept as data: the known issues (`data/known_issues/`), the
signatures of GPU runtime failures in a child's output or a user's log (`data/signatures.json`),
the failure classes a log is put in (`data/failure_classes.json`), what a log's GPU names and archs
say (`data/gpus.json`), the workarounds doctor tries (`data/workarounds.json`), and `explain`,
which reads a log with them.
"""
from pathlib import Path

DATA = Path(__file__).with_name("data")
