"""``[input]`` fields of ``on_invalid = "error"``: the noisy invalid-row count and its threshold.

Whether a release stops on invalid rows is a DP decision: it is made on a
noisy count of the privacy units that have at least one invalid row, noised
and accounted like a table (`dp_pipeline.release.tables.invalid_rows`). The spec
gives that count its noise the way the tables get theirs:

- ``invalid_share``: its share of the budget, when the tables give shares
  (the tables' shares and this one sum to exactly 1);
- ``invalid_sigma2``: its discrete Gaussian σ², when the tables give sigma2;
- ``invalid_threshold``: an integer >= 0; the release is refused when the
  noisy count is above it.

Under ``on_invalid = "drop"`` none of them may be given (nothing is decided).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from dp_pipeline.release.spec.fields import read_integer, read_positive, show_value

__all__ = ["INVALID_FIELDS", "InvalidRowsSpec", "read_invalid_rows"]

INVALID_FIELDS = ("invalid_share", "invalid_sigma2", "invalid_threshold")


@dataclass(frozen=True)
class InvalidRowsSpec:
    """The noisy invalid-row count of ``on_invalid = "error"`` (exact rationals)."""

    share: Fraction | None  # share of the release budget (tables give shares)
    sigma2: Fraction | None  # explicit discrete Gaussian σ² (tables give sigma2)
    threshold: int  # refused when the noisy count is above it


def read_invalid_rows(
    inputs: dict, on_invalid: str, shares: bool, problems: list[str]
) -> InvalidRowsSpec | None:
    """The `InvalidRowsSpec` of ``[input]`` (None under ``"drop"``); problems name the field.

    ``shares``: the tables give shares of a budget (else explicit sigma2).
    """
    given = [name for name in INVALID_FIELDS if name in inputs]
    if on_invalid != "error":
        for name in given:
            problems.append(
                f'input.{name}: only with input.on_invalid = "error" (it sets the noisy '
                f"invalid-row count that decision is made on); remove it"
            )
        return None
    example = (
        'e.g. on_invalid = "error", invalid_share = "1/20", invalid_threshold = 20'
        if shares
        else 'e.g. on_invalid = "error", invalid_sigma2 = 4, invalid_threshold = 20'
    )
    threshold = read_integer(inputs, "invalid_threshold", "input", problems)
    if "invalid_threshold" not in inputs:
        problems.append(
            'input.invalid_threshold: required with on_invalid = "error": the release is '
            "refused when the noisy count of privacy units with an invalid row is above it "
            f"({example})"
        )
    elif threshold is not None and threshold < 0:
        problems.append(f"input.invalid_threshold = {threshold}: must be >= 0")
    share = sigma2 = None
    wanted, other = ("invalid_share", "invalid_sigma2")
    if not shares:
        wanted, other = other, wanted
    if "invalid_share" in inputs:
        share = read_positive(inputs["invalid_share"], "input.invalid_share", problems)
        if share is not None and share >= 1:
            problems.append(
                f"input.invalid_share = {show_value(inputs['invalid_share'])}: must be < 1 "
                "(the tables need the rest of the budget)"
            )
    if "invalid_sigma2" in inputs:
        sigma2 = read_positive(inputs["invalid_sigma2"], "input.invalid_sigma2", problems)
    if wanted not in inputs:
        problems.append(
            f'input.{wanted}: required with on_invalid = "error" when the tables give '
            f"{'shares' if shares else 'sigma2'}: the noisy invalid-row count is noised and "
            f"accounted like a table ({example})"
        )
    if other in inputs:
        problems.append(
            f"input.{other}: the tables give {'shares' if shares else 'sigma2'}; give "
            f"input.{wanted} instead"
        )
    if threshold is None or threshold < 0 or (share if shares else sigma2) is None:
        return None
    return InvalidRowsSpec(share=share, sigma2=sigma2, threshold=threshold)
