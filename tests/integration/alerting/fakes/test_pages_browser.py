"""The local Slack and Jira pages in a real headless browser (the system's chromium, driven
through chromium-driver): after the demo's flow, a person finds each incident's thread with
its chart, and each ticket with its comments and status history; a click on Acknowledge
reaches the service signed and the parent then names who. Screenshots are saved (to
ANCHORWATCH_SCREENSHOT_DIR when set, e.g. docs/)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from anchorwatch.alerting.fakes.jira import LocalJira
from anchorwatch.alerting.fakes.slack import LocalSlack
from anchorwatch.alerting.http import Endpoint
from anchorwatch.alerting.notify import ManualClock
from anchorwatch.alerting.service import list_incidents
from anchorwatch.alerting.silence_book import SilenceBook
from anchorwatch.alerting.slack_actions import SlackInteractions
from anchorwatch.demo.journey_services import slack_permalink
from tests.support.alerting import lifecycle
from tests.support.alerting_harness import Harness, settings_for
from tests.support.journey import JourneyRun, delivered, state_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        pytest.fail(f"{missing} not found: apt-get install -y chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1600",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _screenshot(driver: Any, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    target = os.environ.get("ANCHORWATCH_SCREENSHOT_DIR")
    if target:
        shutil.copy(path, Path(target) / name)


def _posted(run: JourneyRun) -> tuple[list[Any], list[Any]]:
    """The incidents people were told of (a Slack thread), and of those the drift incidents
    that resolved: the silenced one, the group's members and the open group and notice of
    the demo's operator drills are not among the latter."""
    items = list_incidents(state_path(run), open_only=False, limit=100)
    posted = [i for i in items if i.refs.slack_ts is not None]
    resolved = [
        i for i in posted if i.row.state == "resolved" and i.row.rule not in ("group", "watchdog")
    ]
    return posted, sorted(resolved, key=lambda i: i.row.opened_at_ms)


def test_slack_channel_view_shows_each_incident_thread_with_its_chart(
    journey_run: JourneyRun, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    run = journey_run
    posted, resolved = _posted(run)
    assert len(resolved) >= len(run.plan.labels) - 1  # the silenced one is never posted
    # The charts in each thread by the outbox: sent, or found there after a cut-off upload
    # (a superseded update's chart is not sent).
    ids = [i.row.incident_id for i in resolved]
    charts_sent = delivered(run, ids, "slack", "chart", ("sent", "reconciled"))
    assert sum(charts_sent.values()) > 0
    for item in resolved:
        refs = item.refs
        assert refs.slack_ts is not None
        # The permalink the demo prints opens the channel with that thread highlighted.
        browser.get(slack_permalink(f"{run.slack_url}/", refs.slack_channel, refs.slack_ts))
        (thread,) = browser.find_elements(By.CSS_SELECTOR, "article.thread.focus")
        assert thread.get_attribute("data-ts") == refs.slack_ts
        parent = thread.find_element(By.CSS_SELECTOR, ".parent").text
        assert f"Drift resolved {item.row.doc_type}" in parent
        assert "resolved" in thread.find_element(By.CSS_SELECTOR, ".state").text
        assert "edited" in thread.find_element(By.CSS_SELECTOR, ".edited").text
        resolution = thread.find_elements(By.CSS_SELECTOR, ".reply.resolution")
        assert len(resolution) == 1
        assert "Resolved after" in resolution[0].text
        assert "mean drift back to" in resolution[0].text
        # A chart follows each update posted (an escalation, a progress update); an
        # incident that opened and resolved with none in between has no chart.
        charts = thread.find_elements(By.CSS_SELECTOR, "img.chart")
        assert len(charts) == charts_sent[item.row.incident_id], item.row.doc_type
        for img in charts:  # loaded, and drawn at a real size
            assert (
                browser.execute_script(
                    "return arguments[0].complete && arguments[0].naturalWidth", img
                )
                > 200
            )
    # All threads on the page (the channel's, and the paging channel's for the critical
    # group and notice): the first incident's permalink for the picture.
    first = min(resolved, key=lambda i: i.row.opened_at_ms)
    browser.get(slack_permalink(f"{run.slack_url}/", first.refs.slack_channel,
                                first.refs.slack_ts or ""))  # fmt: skip
    on_page = browser.find_elements(By.CSS_SELECTOR, "article.thread")
    in_channel = [i for i in posted if i.refs.slack_channel == first.refs.slack_channel]
    assert len(on_page) == len(in_channel)
    _screenshot(browser, tmp_path, "local-slack.png")


def _submit(browser: Any) -> None:
    """Click the filter button and wait for the page it loads."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    form = browser.find_element(By.CSS_SELECTOR, "form.filters")
    form.find_element(By.TAG_NAME, "button").click()

    def replaced(_: Any) -> bool:
        # The old page's form is gone: chromedriver says so as a stale element or, when the
        # document is swapped mid-call, as "Node ... does not belong to the document".
        try:
            form.is_enabled()
        except WebDriverException:
            return True
        return False

    WebDriverWait(browser, 10).until(replaced)


def test_jira_list_filters_and_ticket_view_with_comments_and_history(
    journey_run: JourneyRun, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = journey_run
    ticketed = [i for i in list_incidents(state_path(run), open_only=False, limit=100)
                if i.refs.jira_key is not None]  # fmt: skip
    incidents = _posted(run)[1]
    browser.get(f"{run.jira_url}/")
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.ticket")
    assert len(rows) == len(ticketed)
    # Filters, as a person uses them: the open ones (the demo's group and the watchdog's
    # notice outlive the run), then resolved tickets of one doc type.
    Select(browser.find_element(By.NAME, "status")).select_by_value("open")
    _submit(browser)
    still_open = {i.refs.jira_key for i in ticketed if i.row.state == "open"}
    shown = browser.find_elements(By.CSS_SELECTOR, "tr.ticket")
    assert {r.get_attribute("data-key") for r in shown} == still_open
    Select(browser.find_element(By.NAME, "status")).select_by_value("resolved")
    doc = incidents[0].row.doc_type
    Select(browser.find_element(By.NAME, "doc")).select_by_visible_text(doc)
    _submit(browser)
    (row,) = browser.find_elements(By.CSS_SELECTOR, "tr.ticket")
    assert row.get_attribute("data-key") == incidents[0].refs.jira_key
    assert row.find_element(By.CSS_SELECTOR, ".status").text == "Done"
    browser.get(f"{run.jira_url}/")
    _screenshot(browser, tmp_path, "local-jira-list.png")

    for item in incidents:
        key = item.refs.jira_key
        browser.get(f"{run.jira_url}/browse/{key}")
        assert browser.find_element(By.CSS_SELECTOR, ".key").text == key
        summary = browser.find_element(By.CSS_SELECTOR, ".summary").text
        assert summary.startswith(f"[URGENT] Drift Alert: {item.row.doc_type} - Score ")
        assert browser.find_element(By.CSS_SELECTOR, ".status").text == "Done"
        # The description's windows table, rendered from wiki markup.
        assert browser.find_elements(By.CSS_SELECTOR, ".desc table tr")
        assert (
            f"Drift alert for document type {item.row.doc_type}"
            in browser.find_element(By.CSS_SELECTOR, ".desc").text
        )
        comments = browser.find_elements(By.CSS_SELECTOR, ".comment")
        assert comments
        assert comments[-1].text.split("\n")[1].startswith("Resolved")
        history = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "table.history tr")]
        assert history[1].endswith("created To Do")
        assert history[-1].endswith("To Do → Done")
    _screenshot(browser, tmp_path, "local-jira-ticket.png")


def test_acknowledge_clicked_on_the_local_slack_edits_the_parent(
    browser: Any,
    tmp_path: Path,
    slack: LocalSlack,
    jira: LocalJira,
    clock: ManualClock,
) -> None:
    """A person clicks Acknowledge on the local Slack's page: the click goes, signed as Slack
    signs it, to the service's endpoint, and the parent then names who acknowledged."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    secret = "local-signing-secret-0123456789"
    settings = settings_for(tmp_path, slack, jira)
    signed = settings.slack.model_copy(update={"signing_secret": SecretStr(secret)})
    h = Harness(settings.model_copy(update={"slack": signed}), clock)
    h.publish(lifecycle("invoice")[:3])
    h.run()
    handler = SlackInteractions(h.settings.alerting.state_dir, secret)

    def ok() -> tuple[bool, dict[str, Any]]:
        return True, {}

    endpoint = Endpoint("127.0.0.1", 0, CollectorRegistry(), ok, ok, slack=handler.handle).start()
    slack.interactivity_url = f"{endpoint.url}/slack/interactions"
    slack.signing_secret = secret
    try:
        (parent,) = [m for m in slack.messages if not m["thread_ts"]]
        browser.get(f"{slack.url}/archives/{parent['channel']}")
        buttons = browser.find_elements(By.CSS_SELECTOR, ".parent > .actions button")
        assert [b.text for b in buttons] == ["Acknowledge", "Silence 1 h", "Silence until resolved"]
        buttons[0].click()
        WebDriverWait(browser, 10).until(
            lambda d: "acknowledged by" in d.find_element(By.CSS_SELECTOR, ".click-result").text
        )
        assert h.engine.apply_acks(h.clock.ms()) == 1  # what the service loop does
        h.drain()
        browser.get(f"{slack.url}/archives/{parent['channel']}")
        text = browser.find_element(By.CSS_SELECTOR, ".parent").text
        assert "Acknowledged by @U0LOCAL" in text
        buttons = browser.find_elements(By.CSS_SELECTOR, ".parent > .actions button")
        assert [b.text for b in buttons] == ["Silence 1 h", "Silence until resolved"]
        reply = browser.find_element(By.CSS_SELECTOR, ".reply").text
        assert "Acknowledged by @U0LOCAL" in reply
        _screenshot(browser, tmp_path, "local-slack-acknowledged.png")

        # Silence 1 h: a silence of the incident's doc type, by whoever clicked.
        buttons[0].click()
        WebDriverWait(browser, 10).until(
            lambda d: "made by" in d.find_element(By.CSS_SELECTOR, ".click-result").text
        )
        book = SilenceBook(h.settings.alerting.state_dir)
        try:
            (silence,) = book.active(int(time.time() * 1000))
        finally:
            book.close()
        assert (silence.doc_type, silence.incident_id) == ("invoice", None)
        assert 3590 * 1000 <= silence.ends_ms - silence.starts_ms <= 3600 * 1000
        assert "U0LOCAL" in silence.author
    finally:
        endpoint.stop()
