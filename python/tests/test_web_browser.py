"""The dashboard as a person uses it, in headless Chromium against the real database:
load each page, filter, pause a tenant and see it stop being served, requeue from the
archive and see the message return, and watch a live update arrive."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from lonnymq import Message, Queue, Worker
from lonnymq.web import create_app

from .browser import chromium, serve
from .helpers import wait_for

WAIT_S = 20


@pytest.fixture(scope="module")
def browser(base_url: str) -> Iterator[webdriver.Chrome]:
    # Depends on base_url so that it closes first: the server then has no stream to wait for.
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def base_url(dsn: str) -> Iterator[str]:
    with serve(create_app(dsn, actions=True, refresh_s=30)) as url:
        yield url


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def create(db: psycopg.Connection[Any], queue: str, channel: str | None, content: bytes) -> None:
    db.execute("SELECT lonnymq.message_create(%s, %s, %s)", (queue, channel, content))


def wait(browser: webdriver.Chrome, condition: Any, what: str) -> Any:
    # A page being replaced (a form submitted, an htmx refresh) leaves stale elements behind.
    # Caught in the middle of the swap, chromium answers instead that the element "does not
    # belong to the document" (a plain WebDriverException; it failed a CI run): look again.
    # Any other error still fails the test at once.
    def settled(b: webdriver.Chrome) -> Any:
        try:
            return condition(b)
        except WebDriverException as error:
            if "does not belong to the document" in str(error):
                return False
            raise

    waiting = WebDriverWait(browser, WAIT_S, ignored_exceptions=[StaleElementReferenceException])
    return waiting.until(settled, message=what)


def test_every_page_loads(
    browser: webdriver.Chrome, base_url: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    create(db, queue_name, "acme", b'{"hello": "world"}')
    browser.get(base_url + "/")
    assert browser.find_element(By.CSS_SELECTOR, f'tr[data-queue="{queue_name}"]')
    for link, heading in (
        ("Channels", "Channels of"),
        ("Messages", "messages of"),
        ("Archive", "Archive"),
        ("Schedules", "pg_cron jobs"),
        ("Overview", "Queues"),
    ):
        browser.find_element(By.LINK_TEXT, link).click()
        wait(
            browser,
            lambda b, h=heading: h in b.find_element(By.TAG_NAME, "h1").text,
            f"the {link} page",
        )


def test_filter_messages_and_show_content(
    browser: webdriver.Chrome, base_url: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    create(db, queue_name, "acme", b'{"hello": "world"}')
    create(db, queue_name, "globex", b"other")
    browser.get(base_url + "/messages")
    form = browser.find_element(By.CSS_SELECTOR, "form.filters")
    form.find_element(By.CSS_SELECTOR, f'select[name="queue"] option[value="{queue_name}"]').click()
    form.find_element(By.NAME, "channel").send_keys("acme")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    # The form is a GET: rows read before the filtered page has replaced the unfiltered one
    # are the old page's (that failed a run: 4 rows). Look only once the new page is loaded.
    def filtered_rows(b: webdriver.Chrome) -> Any:
        loaded = b.execute_script("return document.readyState") == "complete"
        if "channel=acme" not in b.current_url or not loaded:
            return False
        return b.find_elements(By.CSS_SELECTOR, "#messages tr[data-id]")

    rows = wait(browser, filtered_rows, "the filtered messages")
    assert len(rows) == 1
    rows[0].find_element(By.TAG_NAME, "a").click()
    assert "world" not in browser.page_source  # hidden until asked for
    browser.find_element(By.LINK_TEXT, "JSON").click()
    shown = wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, "pre.content"), "content")
    assert '"hello": "world"' in shown.text


def test_pause_a_tenant_and_see_it_stop_being_served(
    browser: webdriver.Chrome, base_url: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    for channel in ("acme", "acme", "globex", "globex"):
        create(db, queue_name, channel, b"x")
    browser.get(f"{base_url}/channels?queue={queue_name}")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-channel="acme"]')
    row.find_element(By.XPATH, ".//button[text()='pause']").click()
    wait(
        browser,
        lambda b: "paused" in b.find_element(By.CSS_SELECTOR, 'tr[data-channel="acme"]').text,
        "acme shown as paused",
    )
    assert "channel acme: paused" in browser.find_element(By.CSS_SELECTOR, ".notice").text
    served = db.execute(
        "SELECT channel FROM lonnymq.message_dequeue(%s, 60000, 10)", (queue_name,)
    ).fetchall()
    assert sorted(r[0] for r in served) == ["globex", "globex"]

    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-channel="acme"]')
    row.find_element(By.XPATH, ".//button[text()='resume']").click()
    wait(browser, lambda b: "resumed" in b.find_element(By.CSS_SELECTOR, ".notice").text, "resume")
    served = db.execute(
        "SELECT channel FROM lonnymq.message_dequeue(%s, 60000, 10)", (queue_name,)
    ).fetchall()
    assert sorted(r[0] for r in served) == ["acme", "acme"]


def test_see_a_workers_throughput_and_its_periodic_message(
    browser: webdriver.Chrome, base_url: str, db: psycopg.Connection[Any], queue: Queue
) -> None:
    for i in range(12):
        create(db, queue.name, f"tenant-{i % 2}", b"x")
    # An open overview listens for the workers' reports on the queues it lists.
    browser.get(base_url + "/")
    wait_for(
        lambda: (
            db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN lonnymq_stats'"
            ).fetchone()
            == (1,)
        ),
        what="the overview listening",
    )
    ticks: list[Message] = []
    worker = Worker(queue, lambda m: None, stats_interval_ms=100)
    worker.every(60_000, "nightly-report", ticks.append)
    worker.run(until_idle=True)
    assert ticks, "the periodic handler ran"

    def chart(b: webdriver.Chrome) -> Any:
        b.get(base_url + "/")  # this app refreshes on its timer only every 30 s
        found = b.find_elements(By.CSS_SELECTOR, f'tr[data-queue="{queue.name}"] svg.spark')
        return found[0] if found else False

    spark = wait(browser, chart, "the queue's throughput chart")
    assert spark.get_attribute("data-completed") == "12"
    assert spark.find_elements(By.TAG_NAME, "polyline")

    browser.find_element(By.LINK_TEXT, "Schedules").click()
    row = wait(
        browser,
        lambda b: b.find_element(
            By.CSS_SELECTOR, f'tr[data-periodic="{queue.name}/nightly-report"]'
        ),
        "the periodic message on the Schedules page",
    )
    assert "1.0m" in row.text and "ok" in row.text  # its interval and how its last run ended


def test_requeue_from_the_archive_and_see_the_message_return(
    browser: webdriver.Chrome, base_url: str, db: psycopg.Connection[Any], queue_name: str
) -> None:
    create(db, queue_name, "acme", b"poison")
    db.execute(
        "SELECT lonnymq.message_fail(id, num_attempts, 'KeyError: sku')"
        " FROM lonnymq.message_dequeue(%s, 60000)",
        (queue_name,),
    )
    browser.get(f"{base_url}/archive?queue={queue_name}&outcome=failed")
    row = browser.find_element(By.CSS_SELECTOR, "#archive tr[data-id]")
    assert "KeyError: sku" in row.text
    row.find_element(By.XPATH, ".//button[text()='requeue']").click()
    notice = wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, ".notice"), "a notice")
    found = re.search(r"requeued as message (\d+)", notice.text)
    assert found, notice.text
    assert not browser.find_elements(By.CSS_SELECTOR, "#archive tr[data-id]")
    browser.get(f"{base_url}/messages/{found.group(1)}")
    assert "Message " + found.group(1) in browser.find_element(By.TAG_NAME, "h1").text
    live = db.execute(
        "SELECT convert_from(content, 'UTF8') FROM lonnymq.messages WHERE id = %s",
        (int(found.group(1)),),
    ).fetchone()
    assert live == ("poison",)


def test_a_live_update_arrives(
    browser: webdriver.Chrome,
    base_url: str,
    dsn: str,
    db: psycopg.Connection[Any],
    queue_name: str,
) -> None:
    create(db, queue_name, "acme", b"x")
    browser.get(base_url + "/")
    wait(browser, lambda b: b.find_element(By.ID, "live").text == "live", "the event stream")

    def ready_shown(b: webdriver.Chrome) -> str:
        cells = b.find_elements(By.CSS_SELECTOR, f'tr[data-queue="{queue_name}"] td.ready')
        return cells[0].text if cells else ""

    assert ready_shown(browser) == "1"
    # Producers NOTIFY only while a consumer waits (wait_begin): a worker sleeps meanwhile.
    with psycopg.connect(dsn) as sleeper:
        sleeper.execute("SELECT lonnymq.wait_begin(%s)", (queue_name,))
        create(db, queue_name, "acme", b"y")
    # The page refreshes on the timer only every 30 s: this is the event.
    wait(browser, lambda b: ready_shown(b) == "2", "the page updated by the live event")
    assert int(browser.find_element(By.TAG_NAME, "body").get_attribute("data-events-received") or 0)
