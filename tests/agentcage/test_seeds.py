"""Seed files: the templates and the merge (pure), and putting them into a real volume
directory as root, where the agent owns everything and may have planted links."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from agentcage.backends.volumes import OpenVolume, apply_seeds, open_volumes
from agentcage.errors import BackendError
from agentcage.seeds import merge_defaults, placeholder_names, render, render_text
from agentcage.state import CageDir

UID = GID = 1000  # the workload's host uid in these tests (a real unprivileged one)
KEY = "agentcage:secret:ANTHROPIC_API_KEY:0123456789abcdef0123456789abcdef"
PLACEHOLDERS = {"ANTHROPIC_API_KEY": KEY}


# ---- templates and merging (pure) ----------------------------------------------------------

def test_placeholder_names_are_found_anywhere_in_a_seed():
    seed = {"a": ["x", "${placeholder:ONE}"], "${placeholder:TWO:last20}": {"b": 1},
            "c": "no ${placeholder} template ${other:THREE}"}
    assert placeholder_names(seed) == {"ONE", "TWO"}
    assert placeholder_names("key=${placeholder:ONE}") == {"ONE"}


def test_render_fills_placeholders_and_leaves_out_what_names_an_unstored_secret():
    seed = {"approved": ["${placeholder:ANTHROPIC_API_KEY:last20}",
                         "${placeholder:CLAUDE_CODE_OAUTH_TOKEN}", "plain"],
            "token": "${placeholder:CLAUDE_CODE_OAUTH_TOKEN}",
            "key": "Bearer ${placeholder:ANTHROPIC_API_KEY}", "n": 3}
    assert render(seed, PLACEHOLDERS) == {"approved": [KEY[-20:], "plain"],
                                          "key": f"Bearer {KEY}", "n": 3}
    assert render_text("k = ${placeholder:ANTHROPIC_API_KEY}", PLACEHOLDERS) == f"k = {KEY}"
    assert render_text("k = ${placeholder:NOT_STORED}", PLACEHOLDERS) is None


def test_random_is_a_fresh_256_bit_hex_value_at_each_place_and_each_render():
    seed = {"auth": {"token": "${random}"}, "pair": ["${random}", "${random}"]}
    first, second = render(seed, PLACEHOLDERS), render(seed, PLACEHOLDERS)
    values = [first["auth"]["token"], *first["pair"], second["auth"]["token"]]
    assert all(re.fullmatch(r"[0-9a-f]{64}", v) for v in values), values
    assert len(set(values)) == 4
    text = render_text("t=${random} k=${placeholder:ANTHROPIC_API_KEY}", PLACEHOLDERS)
    assert text is not None and re.fullmatch(rf"t=[0-9a-f]{{64}} k={KEY}", text), text


def test_merge_adds_only_what_is_missing_and_keeps_every_value_it_finds():
    current = {"theme": "light", "projects": {"/workspace": {"allowedTools": ["Bash"]}},
               "customApiKeyResponses": {"approved": ["old"], "rejected": ["new"]},
               "numStartups": 4}
    seed = {"theme": "dark", "hasCompletedOnboarding": True,
            "projects": {"/workspace": {"hasTrustDialogAccepted": True,
                                        "allowedTools": ["Other"]}},
            "customApiKeyResponses": {"approved": ["new", "old"]}}
    before = json.dumps(current)
    merged = merge_defaults(current, seed)
    assert json.dumps(current) == before  # not changed in place
    assert merged == {"theme": "light", "hasCompletedOnboarding": True, "numStartups": 4,
                      "projects": {"/workspace": {"allowedTools": ["Bash", "Other"],
                                                  "hasTrustDialogAccepted": True}},
                      "customApiKeyResponses": {"approved": ["old", "new"],
                                                "rejected": ["new"]}}
    assert merge_defaults(merged, seed) == merged  # a second start changes nothing
    assert merge_defaults("a string", {"x": 1}) == "a string"  # a type it does not expect


# ---- into a volume, as root ------------------------------------------------------------------

@pytest.fixture
def volume(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (files owned by another uid)")
    cage = CageDir(tmp_path / "cages" / "c")
    cage.root.mkdir(parents=True)
    [opened] = open_volumes(cage, [("home", "/home/agent", "rw")], UID, GID)
    yield opened, cage.root / "volumes" / "home"
    os.close(opened.fd)


def _seed(path: str, merge: dict | None = None, text: str | None = None):
    if merge is not None:
        return (path, "merge", json.dumps(merge))
    return (path, "text", text)


def test_a_volume_is_made_private_and_the_workloads(volume):
    _opened, root = volume
    st = root.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o700, UID, GID)


def test_a_volume_of_another_uid_is_refused_with_the_fix(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    cage = CageDir(tmp_path / "c")
    cage.root.mkdir()
    os.close(open_volumes(cage, [("home", "/home/agent", "rw")], UID, GID)[0].fd)
    with pytest.raises(BackendError, match=r"belongs to uid 1000.*runs as uid 1001.*chown"):
        open_volumes(cage, [("home", "/home/agent", "rw")], 1001, 1001)


def test_a_link_in_place_of_a_volume_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    cage = CageDir(tmp_path / "c")
    (cage.root / "volumes").mkdir(parents=True)
    (cage.root / "volumes" / "home").symlink_to("/etc")
    with pytest.raises(BackendError, match="not a directory"):
        open_volumes(cage, [("home", "/home/agent", "rw")], UID, GID)


def test_a_missing_file_is_written_the_agents_and_private(volume):
    opened, root = volume
    apply_seeds([opened], [_seed("/home/agent/.claude.json", {"a": 1}),
                           _seed("/home/agent/.codex/config.toml", text="x = 1\n")],
                PLACEHOLDERS, UID, GID)
    doc = root / ".claude.json"
    assert json.loads(doc.read_text()) == {"a": 1}
    made = root / ".codex"
    for path, mode in ((doc, 0o600), (made, 0o700), (made / "config.toml", 0o600)):
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (mode, UID, GID), path
    assert (made / "config.toml").read_text() == "x = 1\n"
    assert not [p for p in root.rglob("*.tmp")]  # no temporary file left


def test_an_existing_file_gains_the_missing_keys_only(volume):
    opened, root = volume
    doc = root / ".claude.json"
    doc.write_text(json.dumps({"theme": "light", "customApiKeyResponses": {"approved": []}}))
    os.chown(doc, UID, GID)
    seed = {"theme": "dark", "hasCompletedOnboarding": True,
            "customApiKeyResponses": {"approved": ["${placeholder:ANTHROPIC_API_KEY:last20}"]}}
    apply_seeds([opened], [_seed("/home/agent/.claude.json", seed)], PLACEHOLDERS, UID, GID)
    assert json.loads(doc.read_text()) == {"theme": "light", "hasCompletedOnboarding": True,
                                           "customApiKeyResponses": {"approved": [KEY[-20:]]}}
    # a rotated placeholder is approved beside the old one, at the next start
    rotated = {"ANTHROPIC_API_KEY": KEY[:-20] + "f" * 20}
    apply_seeds([opened], [_seed("/home/agent/.claude.json", seed)], rotated, UID, GID)
    assert json.loads(doc.read_text())["customApiKeyResponses"]["approved"] == [
        KEY[-20:], "f" * 20]


def test_a_random_token_is_made_at_the_first_start_and_kept_at_the_next(volume):
    # a service's token in its own config: made once, then the same at every start
    opened, root = volume
    seed = [_seed("/home/agent/.svc/config.json", {"auth": {"token": "${random}"}})]
    apply_seeds([opened], seed, PLACEHOLDERS, UID, GID)
    token = json.loads((root / ".svc" / "config.json").read_text())["auth"]["token"]
    apply_seeds([opened], seed, PLACEHOLDERS, UID, GID)
    assert json.loads((root / ".svc" / "config.json").read_text()) == {"auth": {"token": token}}
    assert re.fullmatch(r"[0-9a-f]{64}", token)


def test_a_text_seed_never_replaces_the_agents_file(volume):
    opened, root = volume
    mine = root / "config.toml"
    mine.write_text("mine\n")
    apply_seeds([opened], [_seed("/home/agent/config.toml", text="seed\n")], {}, UID, GID)
    assert mine.read_text() == "mine\n"


def test_what_is_not_a_plain_file_is_left_alone_and_nothing_outside_is_touched(volume,
                                                                               tmp_path):
    opened, root = volume
    outside = tmp_path / "outside.json"
    outside.write_text('{"host": true}')
    (root / "link.json").symlink_to(outside)  # a link the agent planted: never followed
    linked = root / "hard.json"
    os.link(outside, linked)  # a second name of a file elsewhere
    os.mkfifo(root / "fifo.json")  # reading would block: never opened for reading
    (root / "broken.json").write_text("{not json")
    (root / "sub").symlink_to(tmp_path)  # a directory link on the way
    (root / "list.json").write_text("[1, 2]")
    seeds = [_seed(f"/home/agent/{n}", {"seeded": True})
             for n in ("link.json", "hard.json", "fifo.json", "broken.json", "list.json")]
    seeds.append(_seed("/home/agent/sub/deep.json", {"seeded": True}))
    apply_seeds([opened], seeds, {}, UID, GID)
    assert outside.read_text() == '{"host": true}'
    assert (root / "link.json").is_symlink() and linked.read_text() == '{"host": true}'
    assert stat.S_ISFIFO((root / "fifo.json").stat().st_mode)
    assert (root / "broken.json").read_text() == "{not json"
    assert (root / "list.json").read_text() == "[1, 2]"
    assert not (tmp_path / "deep.json").exists()
    # the control: a plain missing file beside them is written
    apply_seeds([opened], [_seed("/home/agent/plain.json", {"seeded": True})], {}, UID, GID)
    assert json.loads((root / "plain.json").read_text()) == {"seeded": True}


def test_a_read_only_volume_gets_no_seed(volume):
    opened, root = volume
    read_only = OpenVolume(opened.name, opened.target, False, opened.fd)
    apply_seeds([read_only], [_seed("/home/agent/x.json", {"a": 1})], {}, UID, GID)
    assert not (root / "x.json").exists()


def test_a_seed_naming_an_unstored_secret_leaves_that_part_out(volume):
    opened, root = volume
    seed = {"approved": ["${placeholder:NOT_STORED:last20}"], "token": "${placeholder:NOT_STORED}",
            "kept": True}
    apply_seeds([opened], [_seed("/home/agent/a.json", seed),
                           _seed("/home/agent/b.txt", text="t=${placeholder:NOT_STORED}")],
                PLACEHOLDERS, UID, GID)
    assert json.loads((root / "a.json").read_text()) == {"approved": [], "kept": True}
    assert not Path(root / "b.txt").exists()
