"""The fixed vocabulary of `parse_status`: every teacher answer gets exactly one.

Built from hybrid VLM-PPO table 1 (I. noisy float regression, II. box grounding / format
collapse, III. stuck multiple-choice answers) and the transport failures of a served model.
A stuck MCQ answer parses fine; it shows up in the audit's distributions, not here.
"""

from __future__ import annotations

from enum import StrEnum


class ParseStatus(StrEnum):
    OK = "ok"  # the requested format, values valid
    REGEX_FALLBACK = (
        "regex_fallback"  # not the requested format, but a lenient pattern found valid values
    )
    OUT_OF_RANGE = (
        "out_of_range"  # numbers parsed but outside the action space: kept raw, not clipped
    )
    NON_FINITE = "non_finite"  # nan / inf where a number was asked for
    WRONG_ARITY = "wrong_arity"  # numbers found, but not one per action dimension
    INVALID_CHOICE = "invalid_choice"  # a choice that is not in the allowed set
    # several different values in one answer: two choices named, a field given twice, an answer
    # that corrects itself after its fields, an objects phrase that may be one or two
    AMBIGUOUS = "ambiguous"
    FORMAT_COLLAPSE = "format_collapse"  # text came back, nothing in it is the asked-for answer
    # no text, only whitespace, an empty list, or a "none" where a list was asked for
    EMPTY = "empty"
    # longer than any honest answer (parsers.MAX_ANSWER_CHARS): stored raw, never read
    TOO_LONG = "too_long"
    TRUNCATED = "truncated"  # generation stopped at the token limit before a parseable answer
    HTTP_ERROR = "http_error"  # the server answered with an error
    TIMEOUT = "timeout"  # no answer within the timeout, after all retries
    # the server answered 200 with no text answer in it: no choices, a content that is not text
    MALFORMED_COMPLETION = "malformed_completion"

    @property
    def has_value(self) -> bool:
        """Whether rows with this status carry a usable parsed value."""
        return self in (ParseStatus.OK, ParseStatus.REGEX_FALLBACK)


# Statuses whose rows carry a label value: everything else is unlabelled for training.
LABELLED_STATUSES = [str(s) for s in ParseStatus if s.has_value]

# Statuses that mean the teacher never answered: not cached, so a rerun asks again.
TRANSPORT_FAILURES = frozenset(
    {ParseStatus.HTTP_ERROR, ParseStatus.TIMEOUT, ParseStatus.MALFORMED_COMPLETION}
)
