"""A fake probe for the output tests (tests/test_outputs.py): the disk fills mid-run."""
import os

import rocmcheck


@rocmcheck.probe("outputs-fill-disk", title="fills a disk", targets="a disk that fills mid-run", timeout=30)
def outputs_fill_disk(ctx):
    """Fill the folder named by $ROCMCHECK_TEST_FILL until the file system says ENOSPC."""
    with open(os.path.join(os.environ["ROCMCHECK_TEST_FILL"], "filler"), "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            ctx.measure(filled=fh.tell())
