"""Release ids from a template and the run date: ``--release-id 'labour-{date:%Y-%m}'``.

A scheduled job runs one command every period; the template gives each period
its own release id (``labour-2026-03``), so a re-run in the same period is the
same release (re-emitted, nothing spent) and the next period is a new one.
The one field is ``date``: the run's date in UTC, or ``--date YYYY-MM-DD`` to
pin it (a backfill, a test); its format is ``strftime``'s (``{date}`` alone is
``2026-03-01``). The template is checked before anything is read: only that
field, no conversion or nested field, and what it gives must be a valid
release id.
"""

from __future__ import annotations

import re
import string
from datetime import UTC, date, datetime

from dp_pipeline.release.spec.fields import check_token
from dp_pipeline.release.spec.model import SpecError

COMMAND_LINE = "command line"  # the source a `SpecError` names

__all__ = ["TEMPLATE_FIELDS", "is_template", "parse_run_date", "render_release_id", "run_date"]

TEMPLATE_FIELDS = ("date",)


def run_date() -> date:
    """Today in UTC: a run's date does not depend on the host's time zone."""
    return datetime.now(UTC).date()


def parse_run_date(text: str) -> date:
    """``--date YYYY-MM-DD`` as a date, or a `SpecError` naming the form."""
    day = None
    if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
        try:
            day = date.fromisoformat(text)
        except ValueError:  # 2026-02-30
            day = None
    if day is None:
        raise SpecError(
            [f"--date {text!r}: must be a date written YYYY-MM-DD, e.g. 2026-03-01"], COMMAND_LINE
        )
    return day


def is_template(text: str) -> bool:
    """Whether ``text`` has a replacement field (``{...}``; ``{{`` is a literal brace)."""
    return any(field is not None for field in _parts(text, "--release-id"))


def render_release_id(template: str, day: date) -> str:
    """The release id ``template`` gives on ``day``; `SpecError` if the template or its
    result breaks a rule (fields, formats and the release id's characters)."""
    flag = f"--release-id {template!r}"
    problems: list[str] = []
    for field, spec, conversion in _parts(template, flag):
        if field is None:
            continue
        if field not in TEMPLATE_FIELDS:
            problems.append(
                f"{flag}: unknown field {{{field}}}; the only field is {{date}} (the run's "
                "date, or --date), e.g. 'labour-{date:%Y-%m}'"
            )
        elif conversion is not None or "{" in spec:
            problems.append(
                f"{flag}: write the field as {{date}} or {{date:FORMAT}} with a strftime "
                "format (no !conversion, no nested field)"
            )
    if problems:
        raise SpecError(problems, COMMAND_LINE)
    try:
        rendered = template.format(date=day)
    except ValueError:
        raise SpecError(
            [f"{flag}: its date format is not a strftime format"], COMMAND_LINE
        ) from None
    check_token(rendered, "release.id", problems)
    if problems:
        raise SpecError(
            [
                f"{flag} gives {rendered!r} on {day.isoformat()}, not a release id: it must "
                "be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
            ],
            COMMAND_LINE,
        )
    return rendered


def _parts(text: str, flag: str):
    """(field, format spec, conversion) of each replacement field of ``text``, field None for
    literal text."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        raise SpecError(
            [f"{flag}: a brace does not close; write {{date:FORMAT}}, and {{{{ for a brace"],
            COMMAND_LINE,
        ) from None
    return [(field, spec or "", conversion) for _, field, spec, conversion in parsed]
