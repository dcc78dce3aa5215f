"""GSM8K rule reward, behaving exactly as VERL's `verl/utils/reward_score/gsm8k.py` (strict method).

VERL's rule, reproduced so rewards here and there agree on the same strings:
  - only the last 300 characters of the response are searched (VERL's regex speed-up);
  - strict: all matches of `#### (-?[0-9.,]+)` (exactly one space after `####`); none -> no answer;
    the LAST match wins; `,` and `$` are removed from it;
  - score 1.0 if that string equals the ground truth string, else 0.0 (format_score 0.0, no
    partial credit). The comparison is on strings: "72.0" or "072" do not equal "72".
Consequences worth knowing (tests pin them):
  - the `$` removal never changes anything: the captured group can only hold digits, `-`, `.` and
    `,`. So "#### $72" has no match at all (the character after "#### " must be one of those);
  - "####72" and "####  72" (no space / two spaces) do not match; "##### 72" does (substring);
  - a trailing period is part of the match: "#### 72." -> "72." which is wrong for "72";
  - "#### 1,234" -> "1234"; "#### -5" -> "-5".
"""
from __future__ import annotations

import re

CLIP_CHARS = 300  # VERL's _SOLUTION_CLIP_CHARS
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(\-?[0-9\.\,]+)")


def extract_solution(text: str, method: str = "strict") -> str | None:
    """The answer string the rule reads from `text`, or None when there is none.

    strict: last `#### <number>` in the last 300 chars; flexible: last number-like token there
    that is not "" or "." (VERL's flexible method, kept for parity).
    """
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    text = text[-CLIP_CHARS:]
    if method == "strict":
        found = _STRICT.findall(text)
        return found[-1].replace(",", "").replace("$", "") if found else None
    # VERL returns the last token it looked at even when every token is "" or "." (loop variable).
    tokens = _FLEXIBLE.findall(text)
    return next((t for t in reversed(tokens) if t not in ("", ".")), tokens[0] if tokens else None)


def gsm8k_reward(response: str, ground_truth: str) -> float:
    """1.0 when the strict answer equals `ground_truth` exactly, else 0.0 (also when there is
    none)."""
    answer = extract_solution(response, "strict")
    return 1.0 if answer is not None and answer == ground_truth else 0.0


_NUMBER = re.compile(r"-?[0-9][0-9,]*(?:\.[0-9]+)?")


def any_format_correct(response: str, ground_truth: str) -> bool:
    """Diagnostic, not a reward: the response's last number (commas removed) equals the ground
    truth, whatever words surround it ("#### 6", "The answer is 6.", "$6"). Separates wrong
    arithmetic from an answer the strict rule cannot read."""
    numbers = _NUMBER.findall(response[-CLIP_CHARS:])
    return bool(numbers) and numbers[-1].replace(",", "") == ground_truth
