import re
import uuid

from gateway.ids import random_hex, uuid4_str


def test_uuid4_str_is_a_canonical_version_4_uuid():
    seen = set()
    for _ in range(2000):
        text = uuid4_str()
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
        seen.add(text)
    assert len(seen) == 2000


def test_random_hex_is_32_hex_digits_and_varies():
    values = {random_hex() for _ in range(2000)}
    assert len(values) == 2000
    assert all(re.fullmatch(r"[0-9a-f]{32}", value) for value in values)
