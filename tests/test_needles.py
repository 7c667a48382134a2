"""The challenge patterns' literal prefilter never hides a match from the regex."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from scrapy_polite.settings.challenges import DEFAULT_PATTERNS
from scrapy_polite.settings.needles import may_match, needles

PATTERNS = [entry["body"] for entry in DEFAULT_PATTERNS if "body" in entry] + [
    r"plain literal", r"(?i)Mixed CASE", r"ab|ac", r"abc|abd|x", r"^anchored", r"(group)first", r"[a-c]lass",
    r"(?i)a|", r"x*y", r"(?i:scoped)rest", r"caf\xe9|K", r"(?i)caf\xe9|K", r"a\.b|c\d",
]
WORDS = [b"verify you are human", b"VERIFY THAT YOU ARE A HUMAN", b"<TITLE> Just a moment...", b"cf-chl-x",
         b"PX-Captcha", b"captcha-delivery.com", b"g-recaptcha", b"H-Captcha", b"plain literal", b"mixed case",
         b"ac", b"ABD", b"anchored", b"groupfirst", b"class", b"y", b"scopedrest", b"SCOPEDrest", b"caf\xe9",
         b"CAF\xc9", b"k", b"K", b"a.b", b"c7", b"nothing here", b""]


def bodies() -> list[bytes]:
    rng = random.Random(7)
    out = [a + b" " + b for a, b in itertools.product(WORDS, repeat=2)]
    out += [bytes(rng.choice(b"aAbBcCkK .-<>x\xe9\xc9") for _ in range(rng.randrange(40))) for _ in range(300)]
    return out


@pytest.mark.parametrize("source", PATTERNS)
def test_a_body_the_regex_matches_always_passes_the_prefilter(source: str) -> None:
    pattern = re.compile(source.encode())
    found, folded = needles(pattern)
    for body in bodies():
        if pattern.search(body):
            assert not found or may_match(found, folded, body, body.lower()), (source, body)


def test_the_default_body_patterns_have_needles_and_anchored_or_grouped_starts_have_none() -> None:
    defaults = [re.compile(entry["body"].encode()) for entry in DEFAULT_PATTERNS if "body" in entry]
    assert all(needles(p)[0] and needles(p)[1] for p in defaults)
    for source in (r"^anchored", r"(group)first", r"[a-c]lass", r"(?i)a|", r"x*y"):
        assert needles(re.compile(source.encode())) == ((), False)
    assert needles(re.compile(rb"ab|ac")) in (((b"a",), False), ((b"ab", b"ac"), False))
