"""GSM8K strict rule reward: the same verdicts as VERL's verl/utils/reward_score/gsm8k.py."""
import pytest

from rlbench.engines.data.reward import CLIP_CHARS, any_format_correct, extract_solution, gsm8k_reward


@pytest.mark.parametrize("response, answer", [
    ("5+3=8\n#### 8", "8"),
    ("#### 3\nno wait\n#### 8", "8"),          # several answers: the last one wins
    ("#### 1,234", "1234"),                    # commas removed
    ("#### -5", "-5"),                         # negatives
    ("#### 2.50", "2.50"),                     # decimals kept as written
    ("#### 8.", "8."),                         # a trailing period is part of the number
    ("##### 8", "8"),                          # "#### " is found inside "##### "
    ("#### 8 dollars", "8"),
    ("#### 8\n", "8"),
])
def test_extracts_strict_answer(response, answer):
    assert extract_solution(response) == answer


@pytest.mark.parametrize("response", [
    "the answer is 8", "####8", "####  8", "#### $8", "#### ", "", "#### eight"])
def test_no_strict_answer(response):
    assert extract_solution(response) is None
    assert gsm8k_reward(response, "8") == 0.0


def test_reward_compares_strings_exactly():
    assert gsm8k_reward("#### 8", "8") == 1.0
    assert gsm8k_reward("#### 8 ", "8") == 1.0
    assert gsm8k_reward("#### 9", "8") == 0.0
    assert gsm8k_reward("#### 8.0", "8") == 0.0
    assert gsm8k_reward("#### 08", "8") == 0.0
    assert gsm8k_reward("#### 8.", "8") == 0.0
    assert gsm8k_reward("#### 1,234", "1234") == 1.0
    assert gsm8k_reward("#### -5", "-5") == 1.0
    assert gsm8k_reward("#### 8\n#### 9", "8") == 0.0


def test_only_last_300_chars_are_read():
    far = "#### 8\n" + "x" * CLIP_CHARS
    assert extract_solution(far) is None and gsm8k_reward(far, "8") == 0.0
    near = "y" + "#### 8\n" + "x" * (CLIP_CHARS - len("#### 8\n"))  # answer starts the window
    assert len(near) > CLIP_CHARS and extract_solution(near) == "8"
    # an earlier answer outside the window never overrides: only what is inside counts
    assert extract_solution("#### 7" + "x" * CLIP_CHARS + "#### 8") == "8"
    # a number cut by the window: the part inside has no "#### " in front
    assert extract_solution("#### 12345" + "x" * (CLIP_CHARS - 3)) is None


def test_flexible_method_takes_last_number():
    assert extract_solution("I think 3, then 4. So 12", "flexible") == "12"
    assert extract_solution("no digits", "flexible") is None
    assert extract_solution("only . and .", "flexible") == "."
    with pytest.raises(ValueError):
        extract_solution("#### 1", "loose")


@pytest.mark.parametrize("response, truth, correct", [
    ("3+4=7\n#### 7", "7", True),
    ("3+4=7\nThe answer is 7.", "7", True),  # the strict rule reads nothing here
    ("He has $1,234 now", "1234", True),
    ("5+1=6\n#### 7", "6", False),  # the last number counts, not any number
    ("-5.", "-5", True),
    ("2.5", "2", False),
    ("no number", "1", False),
    ("", "0", False),
])
def test_any_format_correct_reads_the_last_number(response, truth, correct):
    assert any_format_correct(response, truth) is correct
