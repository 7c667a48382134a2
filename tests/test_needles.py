"""The challenge patterns' needles: the regex tried where they start finds what a whole search finds."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from scrapy_polite.settings.challenges import DEFAULT_PATTERNS
from scrapy_polite.settings.needles import found, needles

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
def test_the_needles_find_a_match_exactly_where_the_regex_does(source: str) -> None:
    pattern = re.compile(source.encode())
    lits, folded = needles(pattern)
    for body in bodies() + [b"verify " * 40 + b"verify you are human", b"<title>" * 50]:
        if lits:
            assert found(pattern, lits, folded, body, body.lower()) == bool(pattern.search(body)), (source, body)


def test_the_default_body_patterns_have_needles_and_anchored_or_grouped_starts_have_none() -> None:
    defaults = [re.compile(entry["body"].encode()) for entry in DEFAULT_PATTERNS if "body" in entry]
    assert all(needles(p)[0] and needles(p)[1] for p in defaults)
    for source in (r"^anchored", r"(group)first", r"[a-c]lass", r"(?i)a|", r"x*y"):
        assert needles(re.compile(source.encode())) == ((), False)
    assert needles(re.compile(rb"ab|ac")) in (((b"a",), False), ((b"ab", b"ac"), False))
