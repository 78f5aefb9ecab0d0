"""End to end in headless Chromium (Playwright): `unilab fleet serve` and twelve simulated
robot hosts (`unilab fleet sim`'s processes) on loopback. The dashboard shows the twelve;
a jammed arm raises a stall alert within 1 s; the tile's Reset button resets it; killing
three hosts marks exactly those three lost within 1 s while the other nine keep updating.
The screenshot is kept in the test's tmp dir (and copied to $UNILAB_FLEET_SCREENSHOT when
set; `bench/fleet.py` writes bench/results/fleet_dashboard.png)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet_fixtures import TOKEN, get_json, http, wait_for
from playwright.sync_api import Page, sync_playwright

from unilab.teleop.fleet.events import read_events
from unilab.teleop.fleet.keys import make_fleet_keys
from unilab.teleop.fleet.launch import ServerProcess, chromium_path, start_server
from unilab.teleop.fleet.sim import SimRobotProcess, start_fleet_sim, stop_fleet_sim

STALL_S = 0.3
"""A healthy arm's observation changes every tick (its target circles), so a short stall
threshold raises no false alerts and leaves the rest of the 1 s for a loaded machine."""
LOST_S = 0.5
JAMMED, KILLED = "sim-03", ("sim-05", "sim-08", "sim-11")


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, dict[str, SimRobotProcess]]]:
    work = tmp_path_factory.mktemp("fleet-e2e")
    keys = make_fleet_keys(work / "keys")
    alerts = ("--stall-s", str(STALL_S), "--lost-s", str(LOST_S))
    server = start_server(keys.root, work, token=TOKEN, extra=alerts)
    robots: list[SimRobotProcess] = []
    try:
        robots = start_fleet_sim(robots=12, fleet=server.link, keys=keys.root, workdir=work)
        wait_for(
            lambda: len(get_json(f"{server.url}/api/state")[1]["robots"]) == 12, 60, "12 robots"
        )
        yield server, {r.name: r for r in robots}
    finally:
        stop_fleet_sim(robots)
        server.stop()


def tiles(page: Page) -> dict[str, dict[str, Any]]:
    """Each tile as the page shows it: mode, alerts, update count, episode, thumbnail."""
    return dict(
        page.evaluate(
            """() => Object.fromEntries([...document.querySelectorAll('article.tile')].map(t => [
                t.dataset.robot, {mode: t.dataset.mode, alerts: t.dataset.alerts || '',
                updates: +t.dataset.updates, episode: +t.dataset.episode,
                lost: t.classList.contains('lost'),
                thumb: t.querySelector('img').naturalWidth}]))"""
        )
    )


def wait_page(page: Page, js: str, arg: Any, timeout_s: float) -> float:
    """Seconds until the predicate `js` holds in the page (fails after `timeout_s`)."""
    t0 = time.monotonic()
    page.wait_for_function(js, arg=arg, timeout=timeout_s * 1e3, polling=20)
    return time.monotonic() - t0


def test_dashboard_end_to_end(
    fleet: tuple[ServerProcess, dict[str, SimRobotProcess]], tmp_path: Path
) -> None:
    server, robots = fleet
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 768})
            page.goto(f"{server.url}/?token={TOKEN}&operator=olga")
            wait_page(
                page,
                """() => [...document.querySelectorAll('article.tile')].filter(t =>
                    t.dataset.mode === 'running' &&
                    t.querySelector('img').naturalWidth > 0).length === 12""",
                None,
                30,
            )
            assert page.is_hidden("#login") and page.is_visible("#tiles")
            shown = tiles(page)
            assert sorted(shown) == sorted(robots) and len(shown) == 12
            assert all(t["alerts"] == "" for t in shown.values())

            # A jammed arm: the stall alert is on its tile and in the list within 1 s.
            os.kill(robots[JAMMED].proc.pid, signal.SIGUSR1)
            took = wait_page(
                page,
                """(name) => document.querySelector(`article.tile[data-robot="${name}"]`)
                    .dataset.alerts.includes('stall') &&
                    document.querySelector(`#alerts li[data-robot="${name}"][data-kind="stall"]`)
                    && document.querySelector(`#queue li[data-robot="${name}"]`)""",
                JAMMED,
                1.0,
            )
            print(f"\nstall alert on the page {took:.2f} s after the jam")
            assert took <= 1.0
            stalled = [n for n, t in tiles(page).items() if "stall" in t["alerts"]]
            assert stalled == [JAMMED]
            episode = tiles(page)[JAMMED]["episode"]

            # Reset from the tile: a new episode, the jam cleared, the alert gone.
            page.click(f'article.tile[data-robot="{JAMMED}"] button[data-op="reset"]')
            wait_page(
                page,
                """([name, ep]) => {
                    const t = document.querySelector(`article.tile[data-robot="${name}"]`);
                    return +t.dataset.episode > ep && !t.dataset.alerts.includes('stall') &&
                        !document.querySelector(`#queue li[data-robot="${name}"]`); }""",
                [JAMMED, episode],
                5,
            )
            time.sleep(2 * STALL_S)  # it moves again: no new stall
            assert "stall" not in tiles(page)[JAMMED]["alerts"]
            assert get_json(f"{server.url}/api/robots/{JAMMED}")[1]["idle_s"] < STALL_S

            # Three hosts die: exactly those three are lost within 1 s.
            before, killed_at = tiles(page), time.time()
            for name in KILLED:
                os.kill(robots[name].proc.pid, signal.SIGKILL)
            took = wait_page(
                page,
                """(names) => names.every(n =>
                    document.querySelector(`article.tile[data-robot="${n}"]`)
                    .classList.contains('lost'))""",
                list(KILLED),
                1.0,
            )
            print(f"3 hosts lost on the page {took:.2f} s after the kill")
            assert took <= 1.0
            time.sleep(1.0)
            after = tiles(page)
            assert sorted(n for n, t in after.items() if t["lost"]) == sorted(KILLED)
            for name in set(robots) - set(KILLED):
                assert after[name]["updates"] >= before[name]["updates"] + 5, name
                assert after[name]["mode"] == "running", name
            assert "12 robots · 3 lost" in page.inner_text("#summary")
            code, body = http("POST", f"{server.url}/api/robots/{KILLED[0]}/reset")
            assert code == 409 and b"is lost" in body

            # Every alert and the operator's action are in the event log, with the ack.
            events = read_events(server.events)
            alerts = {(e["robot"], e["alert"]) for e in events if e["kind"] == "alert"}
            assert {(JAMMED, "stall"), *((n, "lost") for n in KILLED)} <= alerts
            # (Before the kill, a host starved of CPU on a loaded 2-core machine, say while
            # Chromium starts, may miss 0.5 s and be lost for a moment: that is the alert
            # doing its job. From the kill on, only the three killed may be lost.)
            stray = [
                e
                for e in events
                if e.get("alert") == "lost" and e["robot"] not in KILLED and e["time"] > killed_at
            ]
            assert not stray, stray
            acted = [e for e in events if e["kind"] == "operator_action"]
            assert [(e["robot"], e["op"], e["operator"]) for e in acted] == [
                (JAMMED, "reset", "olga")
            ]
            acks = [e for e in events if e["kind"] == "ack"]
            assert [(e["robot"], e["op"], e["ok"]) for e in acks] == [(JAMMED, "reset", True)]

            shot = tmp_path / "fleet_dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            if os.environ.get("UNILAB_FLEET_SCREENSHOT"):
                shutil.copy(shot, os.environ["UNILAB_FLEET_SCREENSHOT"])
        finally:
            browser.close()


def test_wrong_token_shows_the_login(
    fleet: tuple[ServerProcess, dict[str, SimRobotProcess]],
) -> None:
    server, _ = fleet
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True)
        try:
            page = browser.new_page()
            page.goto(f"{server.url}/?token=not-the-token")
            page.wait_for_selector("#login:not([hidden])", timeout=10_000)
            assert page.inner_text("#login-error") == "token refused"
            assert page.locator("article.tile").count() == 0
            page.fill("#login-token", TOKEN)
            page.click("#login button[type=submit]")
            page.wait_for_function(
                "() => document.querySelectorAll('article.tile').length >= 9", timeout=10_000
            )
        finally:
            browser.close()
