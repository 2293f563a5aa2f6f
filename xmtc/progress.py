"""Progress bars that cost nothing when they are off.

tqdm.auto pulls in asyncio (~18 ms and a few MB on first import); a fit on a small data set with
``progress=False`` should not pay that, so the bar library is imported only when a bar is shown.
"""

from __future__ import annotations


class _Silent:
    """The part of tqdm's interface xmtc uses, doing nothing."""

    def update(self, n=1):
        pass

    def set_postfix(self, *args, **kwargs):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def progress_bar(enabled: bool, **kwargs):
    """A tqdm bar (``kwargs`` go to tqdm) when ``enabled``, else a do-nothing stand-in."""
    if not enabled:
        return _Silent()
    from tqdm.auto import tqdm

    return tqdm(dynamic_ncols=True, **kwargs)
