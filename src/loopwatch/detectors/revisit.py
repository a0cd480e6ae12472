"""Revisited page: a browsing agent landing, again, on a page it has already seen."""

from __future__ import annotations

from typing import Any, final

from ..events import TOOL_RESULT, USER
from ..findings import Finding, Severity
from ..fingerprints import page_address
from ..state import DetectorState
from .base import (
    Context,
    Detector,
    Showing,
    dump_pages,
    load_pages,
    preview,
    severity_for,
    show_page,
    trim,
)

__all__ = ["RevisitedPage"]

# New results between two showings of a page that make it a hub returned to: an item
# opened from a list (1), and read further (2) before going back.
_SPOKES_MAX = 2


@final
class RevisitState(DetectorState):
    """The pages each recent address showed, and the last results."""

    __slots__ = ("pages", "results")

    def __init__(self) -> None:
        self.pages: dict[str, list[Showing]] = {}  # see base.show_page
        # the last results (_SPOKES_MAX + 2, this one included): step, the call's key,
        # whether the result was new (neither seen before nor a page shown before)
        self.results: list[list[Any]] = []

    def dump(self) -> Any:
        return [dump_pages(self.pages), self.results]

    @classmethod
    def load(cls, data: Any) -> RevisitState:
        st = cls()
        pages, st.results = data
        st.pages = load_pages(pages)
        return st


class RevisitedPage(Detector):
    """A browsing agent landing on the same page again and again.

    A web agent that re-reads a page from the top, clicks back into a viewer it has
    already opened, or runs the same search and lands on the same results, learns
    nothing from the third showing; the calls that got it there vary (another link,
    a search typed anew, a re-plan), so no call repeats.

    A *page* is a result that names an address near its start (browser tools echo
    the URL: :func:`~loopwatch.fingerprints.page_address`), from a call that is not a
    shell command (a command's output quoting a URL is not a page). Two showings of
    one address are the same page when their word sketches overlap by
    :data:`~loopwatch.fingerprints.SAME_PAGE` (a re-read whose OCR, scroll percentage or
    timestamp differs is the same; another screen of a scrolled page is not). A user
    turn that brings something new starts the count again (a separate request may
    send the agent back to a page it read for the last one).

    A page shown again by the call that showed it last time ("back" again), right
    after one or two new results got by other calls, is a list returned to between
    its items (results, item 1, back, item 2, back): that showing is not counted. A
    page reached anew each time (another search, another link, landing on the same
    viewer), two pages shown in turn with nothing new, and a page shown again by the
    very call that showed something new just before (the same click landing on a page
    that moves a little) are counted. Measured: no run of the corpus or the held-out
    sets changes; a browser agent reading five items from one list of results is no
    longer warned (a test; it was warned at the list's 3rd showing).

    Defaults: warn at the 3rd showing; no stop. Measured with
    ``benchmarks/quality.py`` on the corpus's web runs (Magentic-One, 184 runs): a
    warning on one more labelled loop (a PDF viewer opened three times) and earlier
    warnings on four loops already stopped, none on the 28 runs labelled not-a-loop
    or the 135 unlabelled; warning at the 2nd showing warns 6 of the 28. A stop at
    the 3rd would stop one more loop and nothing else in the corpus, but the same
    page comes back by design when an agent returns to a list of results between
    its items, and the page alone cannot tell the two apart: the stop is left to
    ``stop_at`` (and to the call detectors, which see the calls).
    """

    name = "revisited_page"
    kinds = frozenset({TOOL_RESULT, USER})

    def __init__(self, warn_at: int = 3, stop_at: int | None = None) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), RevisitState)
        ev = ctx.event
        kind = ev.kind
        if kind == USER:
            if ctx.state.news_step == ctx.step:
                st.pages.clear()
            return None
        page = show_page(st.pages, ctx)
        if not st.pages:
            return None  # no page shown yet: nothing to return to (most runs: no list made)
        results = st.results
        step = ctx.step
        call = "" if ctx.call is None else ctx.call.norm
        shown_before = page is not None and page.count >= 2
        results.append([step, call, ctx.novel and not shown_before])
        trim(results, _SPOKES_MAX + 2)
        if page is None or not shown_before:
            return None
        last = page.steps[-2]
        spokes = [r for r in results if last < r[0] < step]
        if (
            0 < len(spokes) <= _SPOKES_MAX
            and all(new and c != call for _, c, new in spokes)
            and any(s == last and c == call for s, c, _ in results)
        ):
            # back, by the call that showed the page last time, after one or two new
            # results got by other calls: the agent returns to a list between its
            # items (results, item 1, back, item 2, back), a hub and not a loop; this
            # showing is not counted
            page.count -= 1
            return None
        severity = severity_for(page.count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        action = (
            "Use what it shows, or go somewhere it has not been."
            if severity is Severity.WARN
            else "Stop coming back to it: use what it shows or finish with what you have."
        )
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(page.steps),
            f"The same page has come back {page.count} times "
            f"({preview(page_address(ev.text), 60)!r}). {action}",
            f"page:{page.sketch[0]:x}",
        )
