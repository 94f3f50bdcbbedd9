"""A table's pre-registration: the family of comparisons written before any seed runs, and the
amendments written later, each before its own cells' seeds (`Table.preregistered`; the report
computes each family with Holm on its own)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Family(BaseModel):
    """One family of comparisons: its hypothesis, primary metric, test and alpha; the report
    computes exactly these comparisons, Holm-adjusted over the family."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hypothesis: str = Field(description="the claim the table can refute, in words")
    primary: str = Field(description="the primary metric, in words")
    test: Literal["fisher", "mannwhitney"] = Field(
        description="`fisher`: Fisher's exact test on the seeds whose metric reaches `success`; "
        "`mannwhitney`: the Mann-Whitney U test on the per-seed metric"
    )
    success: float | None = Field(
        default=None, description="fisher: a seed succeeds when its metric is >= this"
    )
    alternative: Literal["greater", "two-sided"] = Field(
        default="greater", description="one-sided (the cell above the other) or two-sided"
    )
    alpha: float = Field(default=0.05, gt=0, lt=1, description="family-wise error rate (Holm)")
    comparisons: list[tuple[str, str]] = Field(
        min_length=1, description="(cell, against): the family"
    )
    secondary: list[str] = Field(
        default_factory=list,
        description="secondary outcomes, in words (the report adds Mann-Whitney on the metric)",
    )

    @model_validator(mode="after")
    def _success_for_fisher(self) -> Family:
        if self.test == "fisher" and self.success is None:
            raise ValueError("test fisher counts seeds that reach `success`: give success")
        return self


class Amendment(Family):
    """A family added to a pre-registered table once its first results showed what they leave
    open: new cells and the comparisons that involve them, committed before any seed of its
    cells runs (that commit is its date). Its own Holm family: the first one is untouched."""

    why: str = Field(description="what the results so far leave open, in words")
    cells: list[str] = Field(
        min_length=1, description="the cells it adds: in no comparison of an earlier family"
    )

    @model_validator(mode="after")
    def _tests_its_cells(self) -> Amendment:
        for pair in self.comparisons:
            if not set(pair) & set(self.cells):
                raise ValueError(
                    f"amendment comparison {list(pair)} involves none of its cells {self.cells}: "
                    "an amendment tests what it adds, not a pair the results have already shown"
                )
        return self


class Preregistration(Family):
    """What a table tests, written before any seed runs (its commit is the date), and the
    amendments written later, each before its own cells' seeds."""

    amendments: list[Amendment] = Field(
        default_factory=list, description="families added later, each with its own cells"
    )

    @model_validator(mode="after")
    def _amendments_add_cells(self) -> Preregistration:
        tested = {c for pair in self.comparisons for c in pair}
        for k, amendment in enumerate(self.amendments, 1):
            again = sorted(set(amendment.cells) & tested)
            if again:
                raise ValueError(
                    f"amendment {k}: {again} already in an earlier family's comparisons; an "
                    "amendment adds cells that no earlier family tested"
                )
            tested |= {c for pair in amendment.comparisons for c in pair}
        return self

    def families(self) -> list[Family]:
        """The first family, then each amendment's."""
        return [self, *self.amendments]
