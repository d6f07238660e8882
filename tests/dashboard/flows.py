"""The developer dashboard's flows in a real headless Chromium (Debian's), run by tests/dashboard.rs.

Usage: flows.py BASE_URL DEMO_KEY ADMIN_TOKEN SCREENSHOT_DIR OUT_JSON

Everything is done through the page as a user would (clicks, typing, keyboard); plain HTTP
calls (urllib) only check what the page claims against the API, set up 100 eSIMs for the
narrow-table check, and play the webhook receiver. Exits non-zero on the first failure.
"""

import http.server
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from playwright.sync_api import expect, sync_playwright

BASE, DEMO_KEY, ADMIN, SHOTS, OUT = sys.argv[1:6]
RESELLER = BASE + "/api/v2/reseller"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
XSS_LABEL = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
TIMEOUT_MS = 15_000


def http_call(method, url, token, body=None):
    """(status, json body) of one plain HTTP call."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


class Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook receiver: answers 500 while `failing`, then 200; records every POST."""

    failing = True
    received = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        Receiver.received.append(json.loads(body))
        self.send_response(500 if Receiver.failing else 200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def console_error(problems, message):
    """Console errors fail the run (a CSP violation is one), except the browser's own line
    for an HTTP error status, which the flows cause on purpose (a bad key, a refused fund)."""
    if message.type == "error" and not message.text.startswith("Failed to load resource"):
        problems.append(f"console: {message.text}")


def step(name):
    print(f"dashboard flow: {name}", flush=True)


def wallet_balance():
    status, wallet = http_call("GET", RESELLER + "/wallet/balance", DEMO_KEY)
    assert status == 200, wallet
    return wallet["balance_usd"]


def confirm(page, box):
    """Clicks the Confirm button of a confirm step (it must appear first)."""
    button = page.locator(f"#{box} button.danger")
    expect(button).to_be_visible()
    button.click()


def poll_until(page, refresh, locator, what):
    """Clicks `refresh` until `locator` shows up (at most 15 s)."""
    for _ in range(60):
        if locator.count() > 0:
            return
        page.locator(refresh).click()
        page.wait_for_timeout(250)
    raise AssertionError(f"never showed: {what}")


def shoot(page, name):
    """A screenshot of the whole page: the viewport is made as tall as the page first, so
    the report's frame (painted by its own renderer) is drawn too, then put back."""
    size = page.viewport_size
    height = page.evaluate("() => document.documentElement.scrollHeight")
    page.set_viewport_size({"width": size["width"], "height": height})
    page.wait_for_timeout(400)
    page.screenshot(path=os.path.join(SHOTS, name))
    page.set_viewport_size(size)


def check_labels(page, where):
    """Every input, select, textarea and button in the DOM (shown or not) has an accessible name."""
    missing = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea, button')].filter((e) => {
            if (e.tagName === 'BUTTON') return !(e.textContent.trim() || e.getAttribute('aria-label'));
            return !(e.labels && e.labels.length && [...e.labels].some((l) => l.textContent.trim()))
                && !e.getAttribute('aria-label');
        }).map((e) => e.outerHTML.slice(0, 120))"""
    )
    assert not missing, f"controls without a label ({where}): {missing}"


def section(page, view, name):
    """Opens a section of a view by its side-bar button; only its pane shows."""
    page.click(f".section-tab[data-view='{view}'][data-section='{name}']")
    expect(page.locator(f"#pane-{name}")).to_be_visible()


def check_sections(page, view):
    """Each side-bar button of a view shows its own pane and hides the others."""
    buttons = page.locator(f".section-tab[data-view='{view}']")
    names = [buttons.nth(i).get_attribute("data-section") for i in range(buttons.count())]
    assert len(names) >= 3, names
    for name in names:
        section(page, view, name)
        expect(page.locator(f".section-tab[data-section='{name}']")).to_have_attribute("aria-current", "true")
        for other in names:
            if other != name:
                expect(page.locator(f"#pane-{other}")).to_be_hidden()


def check_one_line(page, selector, what):
    """Every element matching `selector` is on one line: its box is no taller than one
    line of its own text, and nothing of it is clipped or wrapped."""
    found = page.evaluate(
        """(selector) => [...document.querySelectorAll(selector)].filter((e) => e.offsetParent).map((e) => {
            const style = getComputedStyle(e);
            const line = parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.45;
            const box = e.getBoundingClientRect();
            return [e.textContent, box.height, line, e.scrollWidth - e.clientWidth];
        })""",
        selector,
    )
    assert found, f"no {what} shown ({selector})"
    for text, height, line, clipped in found:
        assert height < line * 1.5, f"{what} {text!r} wraps: {height}px high, one line is {line}px"
        assert clipped <= 1, f"{what} {text!r} is clipped by {clipped}px"


def advance_next(page):
    """Clicks "Advance to the next due time" and waits for the clock to move."""
    before = page.locator("#clock-now time").get_attribute("datetime")
    page.click("#advance-next")
    page.wait_for_function(
        "(before) => { const t = document.querySelector('#clock-now time'); return t && t.getAttribute('datetime') !== before; }",
        arg=before,
    )
    expect(page.locator("#clock-msg")).to_contain_text("Advanced")


def check_no_script_ran(page):
    assert page.evaluate("() => window.__xss") is None, "the label's script ran"
    assert page.locator('img[src="x"]').count() == 0, "the label's <img> became an element"
    assert page.locator("script:not([src])").count() == 0, "an inline script is in the page"


def keys_and_refill(page, out):
    """API keys (create, shown once, revoke: then 401 over HTTP) and auto-refill."""
    step("create an API key (shown once) and revoke it")
    section(page, "reseller", "keys")
    page.click("#key-create")
    key_node = page.locator("#key-once code.secret")
    expect(key_node).to_be_visible()
    new_key = key_node.inner_text()
    assert new_key.startswith("rsk_") and new_key != DEMO_KEY, new_key
    status, _ = http_call("GET", RESELLER + "/account", new_key)
    assert status == 200, "the new key works"
    page.click("#key-once button")
    assert new_key not in page.content(), "the new key stays in the page after dismissal"
    rows = page.locator("#keys-table tbody tr")
    target = None
    for index in range(rows.count()):
        prefix = rows.nth(index).locator("code").inner_text().rstrip("…")
        if new_key.startswith(prefix) and "no" in rows.nth(index).inner_text():
            target = rows.nth(index)
    assert target is not None, "the new key is listed by its prefix"
    target.locator("button", has_text="Revoke").click()
    confirm(page, "key-confirm")
    expect(page.locator("#keys-msg")).to_contain_text("Revoked")
    status, answer = http_call("GET", RESELLER + "/account", new_key)
    assert status == 401, ("the revoked key", status, answer)
    out["revoked_key"] = new_key

    step("auto-refill settings")
    section(page, "reseller", "refill")
    page.check("#refill-enabled")
    page.fill("#refill-amount", "30")
    page.click("#refill-form button[type=submit]")
    expect(page.locator("#refill-msg")).to_contain_text("Auto-refill saved")
    status, refill = http_call("GET", RESELLER + "/auto-refill", DEMO_KEY)
    assert status == 200 and refill["enabled"] is True and refill["amount_usd"] == 30, refill
    page.uncheck("#refill-enabled")
    page.click("#refill-form button[type=submit]")
    expect(page.locator("#refill-state")).to_contain_text("Enabled")


def inventory(page):
    """The inventory shows the stock (no value typed in), and lowering it asks first."""
    step("the inventory shows the stock and asks before lowering it")
    section(page, "operator", "inventory")
    status, digest = http_call("GET", BASE + "/admin/v1/state", ADMIN)
    stock = digest["inventory"]["available"]
    assert status == 200 and stock > 10, digest
    expect(page.locator("#inventory-stock")).to_have_text(f"{stock:,}")
    expect(page.locator("#inventory-available")).to_have_value("")
    page.fill("#inventory-available", str(stock // 100))
    page.click("#inventory-form button[type=submit]")
    question = page.locator("#inventory-confirm")
    expect(question).to_be_visible()
    expect(question).to_contain_text(f"Lower the stock from {stock:,} to {stock // 100:,}")
    question.locator("button", has_text="Cancel").click()
    assert http_call("GET", BASE + "/admin/v1/state", ADMIN)[1]["inventory"]["available"] == stock, "cancel keeps the stock"
    page.fill("#inventory-available", str(stock + 5))
    page.click("#inventory-form button[type=submit]")
    expect(page.locator("#inventory-msg")).to_contain_text(f"Inventory set to {stock + 5:,} profiles")
    expect(page.locator("#inventory-confirm")).to_be_hidden()
    expect(page.locator("#inventory-stock")).to_have_text(f"{stock + 5:,}")
    page.fill("#inventory-available", str(stock))
    page.click("#inventory-form button[type=submit]")
    confirm(page, "inventory-confirm")
    expect(page.locator("#inventory-stock")).to_have_text(f"{stock:,}")
    assert http_call("GET", BASE + "/admin/v1/state", ADMIN)[1]["inventory"]["available"] == stock


def pending_usage_report(page):
    """Provision, fund and use data, advance a minute: the sandbox lists the usage report
    still waiting for the reporting pause, with its due time; advancing to it reports it."""
    step("the sandbox lists a usage report waiting for the reporting pause")
    section(page, "reseller", "esims")
    page.fill("#provision-label", "Pending demo")
    page.select_option("#provision-group", "")
    shown = page.locator("#esim-detail-iccid").inner_text()
    page.click("#provision-form button[type=submit]")
    expect(page.locator("#esim-detail-iccid")).not_to_have_text(shown)
    fresh = page.locator("#esim-detail-iccid").inner_text()
    expect(page.locator("#provision-msg")).to_contain_text(f"Provisioned {fresh}")
    page.fill("#fund-amount", "10")
    page.click("#fund-form button[type=submit]")
    confirm(page, "esim-confirm")
    expect(page.locator("#esim-msg")).to_contain_text("Funded 10.00 USD")
    page.click("#tab-sandbox")
    section(page, "sandbox", "devices")
    page.fill("#install-iccid", fresh)
    page.click("#install-form button[type=submit]")
    expect(page.locator("#device-msg")).to_have_text(f"Installed {fresh}.")
    page.fill("#usage-iccid", fresh)
    page.fill("#usage-mb", "50")
    page.click("#usage-form button[type=submit]")
    expect(page.locator("#device-msg")).to_contain_text("charged")
    section(page, "sandbox", "clock")
    page.click("button.advance[data-seconds='60']")
    expect(page.locator("#clock-msg")).to_contain_text("Advanced 60 s")
    expect(page.locator("#happened-pending")).to_contain_text("Still pending")
    report = page.locator("#pending-table tbody tr", has_text=fresh)
    expect(report).to_contain_text("Usage report")
    status, pending = http_call("GET", BASE + "/sandbox/v1/pending", ADMIN)
    listed = [t for t in pending["timers"] if t.get("iccid") == fresh and t["kind"] == "usage_report"]
    assert status == 200 and len(listed) == 1, pending
    expect(report.locator("time")).to_have_attribute("datetime", listed[0]["due_at"])
    status, detail = http_call("GET", f"{RESELLER}/esim/{fresh}", DEMO_KEY)
    assert detail["total_data_charged_usd"] == 0, detail
    for _ in range(10):
        if page.locator("#pending-table tbody tr", has_text=fresh).count() == 0:
            break
        advance_next(page)
    expect(page.locator("#pending-table tbody tr", has_text=fresh)).to_have_count(0)
    status, detail = http_call("GET", f"{RESELLER}/esim/{fresh}", DEMO_KEY)
    assert detail["total_data_charged_usd"] > 0, ("reported once due", detail)
    step("the fund's success message is gone: the eSIM it described has changed since")
    page.click("#tab-reseller")
    expect(page.locator("#esim-wallet")).to_have_text(f"{detail['wallet_balance_usd']:.2f}")
    expect(page.locator("#esim-msg")).to_have_text("")


def main():
    os.makedirs(SHOTS, exist_ok=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hook_url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    _, bad = http_call("GET", RESELLER + "/account", "rsk_not_a_key")
    _, bad_admin = http_call("GET", BASE + "/sandbox/v1/clock", "not-the-token")
    out = {}
    problems = []

    with sync_playwright() as driver, tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        context = driver.chromium.launch_persistent_context(
            profile, executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(TIMEOUT_MS)
        expect.set_options(timeout=TIMEOUT_MS)
        page = context.pages[0] if context.pages else context.new_page()
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda m: console_error(problems, m))

        try:
            flows(context, page, hook_url, bad, bad_admin, out, problems)
        except BaseException:
            for index, opened in enumerate(context.pages):
                opened.screenshot(path=os.path.join(SHOTS, f"failure-{index}.png"), full_page=True)
            raise
        context.close()

    server.shutdown()
    assert not problems, problems
    with open(OUT, "w") as handle:
        json.dump(out, handle)
    print("dashboard flow: all passed", flush=True)


def flows(context, page, hook_url, bad, bad_admin, out, problems):
    """The flows, in order; each step checks what the page shows against the API."""
    if True:
        step("the sign-in form gives the spec's error text on a bad key")
        page.goto(BASE + "/dashboard")
        assert page.url == BASE + "/dashboard/", page.url
        page.fill("#reseller-key", "rsk_not_a_key")
        page.click("#reseller-signin button[type=submit]")
        expect(page.locator("#reseller-signin-error")).to_contain_text(bad["message"])
        assert page.evaluate("() => sessionStorage.getItem('esim.dashboard.api_key')") is None

        step("sign in with the demo key, by keyboard only")
        page.locator("#reseller-key").fill("")
        page.locator("body").focus()
        for _ in range(30):
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement.id") == "reseller-key":
                break
        else:
            raise AssertionError("Tab never reached the API key field")
        page.keyboard.type(DEMO_KEY)
        page.keyboard.press("Enter")
        expect(page.locator("#reseller-app")).to_be_visible()
        expect(page.locator("#wallet-balance")).to_have_text(f"{wallet_balance():.2f}")
        assert DEMO_KEY not in page.url and DEMO_KEY not in page.content(), "the key is in the page"
        assert context.cookies() == [], "no cookie"
        assert page.evaluate("() => localStorage.length") == 0, "nothing in localStorage"
        check_labels(page, "signed in")

        step("the side bar switches sections; the overview explains the figures")
        check_sections(page, "reseller")
        section(page, "reseller", "overview")
        for words in ["Lifetime usage", "Data not yet reported", "Conversion dust", "Returns on their way", "Forfeited"]:
            expect(page.locator("#pane-overview dl.words dt", has_text=words)).to_have_count(1)

        step("provision with a hostile label: shown as text, nothing runs")
        before = wallet_balance()
        section(page, "reseller", "esims")
        page.fill("#provision-label", XSS_LABEL)
        page.fill("#provision-ref", "cust-<b>1</b>")
        page.click("#provision-form button[type=submit]")
        expect(page.locator("#provision-msg")).to_contain_text("Provisioned")
        expect(page.locator("#esim-detail-iccid")).to_have_text(re.compile(r"^[0-9]{19,20}$"))
        iccid = page.locator("#esim-detail-iccid").inner_text()
        expect(page.locator("#esims-table tbody td", has_text=XSS_LABEL)).to_have_count(1)
        expect(page.locator("#esim-detail", has_text=XSS_LABEL)).to_have_count(1)
        expect(page.locator("#esims-table tbody td", has_text="cust-<b>1</b>")).to_have_count(1)
        check_no_script_ran(page)
        qr = page.locator("#esim-qr img")
        expect(qr).to_be_visible()
        assert qr.get_attribute("src").startswith("data:image/png;base64,")
        assert page.evaluate("() => document.querySelector('#esim-qr img').naturalWidth") > 0, "QR image loads"
        expect(page.locator("#esim-detail code")).to_contain_text("LPA:1$")
        expect(page.locator("#esim-detail a", has_text="Install link")).to_have_count(1)
        step("ICCIDs and times stay on one line; enum values are in words with the code as a tooltip")
        check_one_line(page, "#esims-table tbody .id", "an ICCID")
        check_one_line(page, "#esims-table tbody time", "a time")
        check_one_line(page, "#esim-detail-iccid", "the open ICCID")
        status = page.locator("#esim-status")
        expect(status).to_have_text("Pending (not installed yet)")
        expect(status).to_have_attribute("title", "API value: pending")
        speed = page.locator("#throttle-speed option[value='SPEED_1500_KBPS']")
        expect(speed).to_have_text("1.5 Mbit/s")
        expect(page.locator("#throttle-speed option[value='NO_LIMIT']")).to_have_text("No limit (full speed)")
        step("after a reload, the eSIM opened from the list shows its QR (GET /esim/{iccid}/qr-code)")
        page.reload()
        page.locator("#esims-table button", has_text=iccid).click()
        expect(page.locator("#esim-detail-iccid")).to_have_text(iccid)
        expect(page.locator("#esim-qr img")).to_be_visible()
        assert page.evaluate("() => document.querySelector('#esim-qr img').naturalWidth") > 0, "QR image loads"
        after_provision = wallet_balance()
        assert round(before - after_provision, 2) == 1.75, (before, after_provision)

        step("fund the eSIM (confirmed) and see the wallet")
        page.fill("#fund-amount", "20")
        page.click("#fund-form button[type=submit]")
        expect(page.locator("#esim-msg")).to_have_text("")
        confirm(page, "esim-confirm")
        expect(page.locator("#esim-msg")).to_contain_text("Funded 20.00 USD")
        status, detail = http_call("GET", f"{RESELLER}/esim/{iccid}", DEMO_KEY)
        assert status == 200 and detail["wallet_balance_usd"] > 0, detail
        expect(page.locator("#esim-wallet")).to_have_text(f"{detail['wallet_balance_usd']:.2f}")
        expect(page.locator("#wallet-balance")).to_have_text(f"{after_provision - 20:.2f}")
        assert wallet_balance() == round(after_provision - 20, 2)

        step("a refused action shows the spec's error text")
        page.fill("#fund-amount", "5000")
        page.click("#fund-form button[type=submit]")
        confirm(page, "esim-confirm")
        status, refused = http_call("POST", f"{RESELLER}/esim/{iccid}/fund", DEMO_KEY, {"amount": 5000})
        assert status == 402, refused
        expect(page.locator("#esim-msg")).to_contain_text(refused["message"])
        expect(page.locator("#esim-msg")).to_have_class("msg bad")

        step("register a webhook to a receiver that fails; its secret is shown once")
        section(page, "reseller", "webhooks")
        page.fill("#webhook-url", hook_url)
        page.fill("#webhook-events", "esim.defunded")
        page.click("#webhook-create button[type=submit]")
        secret_node = page.locator("#webhook-secret code.secret")
        expect(secret_node).to_be_visible()
        secret = secret_node.inner_text()
        assert secret.startswith("whsec_"), secret
        page.click("#webhook-secret button")
        expect(page.locator("#webhook-secret")).to_be_hidden()
        assert secret not in page.content(), "the secret stays in the page after dismissal"
        expect(page.locator("#webhooks-table tbody td", has_text=hook_url)).to_have_count(1)

        step("defund (confirmed)")
        section(page, "reseller", "esims")
        page.click("#esim-defund")
        confirm(page, "esim-confirm")
        expect(page.locator("#esim-msg")).to_contain_text("Defund accepted")
        before_advance = wallet_balance()

        step("the sandbox: a bad admin token, then sign in and advance 15 minutes")
        page.click("#tab-sandbox")
        page.fill("#admin-token", "not-the-token")
        page.click("#admin-signin button[type=submit]")
        expect(page.locator("#admin-signin-error")).to_contain_text(bad_admin["message"])
        page.fill("#admin-token", ADMIN)
        page.click("#admin-signin button[type=submit]")
        expect(page.locator("#sandbox-app")).to_be_visible()
        clock_before = page.locator("#clock-now").inner_text()
        page.click("button.advance[data-seconds='900']")
        expect(page.locator("#clock-msg")).to_contain_text("Advanced 900 s")
        assert page.locator("#clock-now").inner_text() != clock_before
        credited = wallet_balance()
        esim_wallet = detail["wallet_balance_usd"]
        assert credited == round(before_advance + esim_wallet, 2), (before_advance, esim_wallet, credited)
        expect(page.locator("#happened-balances tbody tr", has_text=f"+{esim_wallet:.2f}")).to_have_count(1)
        expect(page.locator("#happened-events tbody td", has_text=re.compile(r"^esim\.defunded$"))).to_have_count(1)
        expect(page.locator("#happened-pending")).not_to_be_empty()
        check_sections(page, "sandbox")
        section(page, "sandbox", "devices")
        page.fill("#install-iccid", iccid)
        page.click("#install-form button[type=submit]")
        expect(page.locator("#device-msg")).to_have_text(f"Installed {iccid}.")
        status, detail_now = http_call("GET", f"{RESELLER}/esim/{iccid}", DEMO_KEY)
        assert detail_now["activated_at"] is not None, detail_now
        check_labels(page, "sandbox")
        section(page, "sandbox", "clock")
        shoot(page, "sandbox.png")

        step("back on the reseller view: the credit and the esim.defunded event")
        page.click("#tab-reseller")
        section(page, "reseller", "overview")
        expect(page.locator("#wallet-balance")).to_have_text(f"{credited:.2f}")
        section(page, "reseller", "events")
        expect(page.locator("#events-table tbody td", has_text="esim.defunded")).to_have_count(1)
        check_one_line(page, "#events-table tbody time", "an event's time")
        page.locator("#events-table tbody tr", has_text="esim.defunded").locator("button").click()
        expect(page.locator("#event-envelope")).to_contain_text('"event": "esim.defunded"')
        expect(page.locator("#event-envelope")).to_contain_text(iccid)

        step("a group: create, fund (confirmed), provision into it, remove the member")
        group_name = "Team <b>bold</b> & co"
        section(page, "reseller", "groups")
        page.fill("#group-name", group_name)
        page.click("#group-create button[type=submit]")
        expect(page.locator("#groups-msg")).to_contain_text(f"Created group {group_name}")
        page.fill("#group-fund-amount", "10")
        page.click("#group-fund-form button[type=submit]")
        confirm(page, "group-confirm")
        expect(page.locator("#groups-msg")).to_contain_text("Funded the group with 10.00 USD")
        status, groups = http_call("GET", RESELLER + "/groups", DEMO_KEY)
        group = next(g for g in groups["groups"] if g["name"] == group_name)
        expect(page.locator("#groups-table tbody tr", has_text=group_name)).to_contain_text(f"{group['balance_usd']:.2f}")
        section(page, "reseller", "esims")
        page.select_option("#provision-group", label=group_name)
        page.fill("#provision-label", "In the group")
        page.click("#provision-form button[type=submit]")
        expect(page.locator("#provision-msg")).to_contain_text("Provisioned")
        section(page, "reseller", "groups")
        member = page.locator("#group-members tbody tr", has_text="In the group")
        expect(member).to_have_count(1)
        member.locator("button", has_text="Remove").click()
        confirm(page, "group-confirm")
        expect(page.locator("#groups-msg")).to_contain_text("Removed")
        expect(page.locator("#group-members tbody tr", has_text="In the group")).to_have_count(0)
        section(page, "reseller", "esims")
        page.click(f"#esims-table tbody button:text('{iccid}')")
        expect(page.locator("#esim-detail-iccid")).to_have_text(iccid)

        step("the delivery log shows the failed attempt; resend it and see it delivered")
        section(page, "reseller", "webhooks")
        page.locator("#webhooks-table tbody tr", has_text=hook_url).locator("button", has_text="Delivery log").click()
        poll_until(page, "#deliveries-refresh", page.locator("#deliveries-table tr.failed", has_text="HTTP 500"), "a failed attempt")
        assert len(Receiver.received) >= 1 and Receiver.received[0]["event"] == "esim.defunded", Receiver.received
        Receiver.failing = False
        page.locator("#deliveries-table tr.failed").first.locator("button", has_text="Resend").click()
        expect(page.locator("#webhooks-msg")).to_contain_text("Resent esim.defunded")
        poll_until(page, "#deliveries-refresh", page.locator("#deliveries-table tr.ok", has_text="(manual)"), "the resent attempt delivered")
        expect(page.locator("#deliveries-table tr.ok", has_text="(manual)")).to_contain_text("delivered (HTTP 200)")
        ids = {envelope["id"] for envelope in Receiver.received}
        assert len(Receiver.received) >= 2 and len(ids) == 1, Receiver.received

        pending_usage_report(page)
        keys_and_refill(page, out)
        check_no_script_ran(page)
        section(page, "reseller", "esims")
        page.evaluate("() => window.scrollTo(0, 0)")
        shoot(page, "reseller.png")

        step("the operator tops up an account and opens the report")
        held = wallet_balance()
        page.click("#tab-operator")
        expect(page.locator("#operator-app")).to_be_visible()
        status, listed = http_call("GET", BASE + "/admin/v1/accounts", ADMIN)
        demo_id = listed["accounts"][0]["account_id"]
        demo_row = page.locator("#accounts-table tbody tr", has_text=demo_id)
        expect(demo_row).to_contain_text(f"{held:.2f}")
        demo_row.locator("button", has_text="Manage").click()
        page.fill("#topup-amount", "50")
        page.click("#topup-form button[type=submit]")
        expect(page.locator("#accounts-msg")).to_contain_text(f"balance {held + 50:.2f} USD")
        expect(demo_row).to_contain_text(f"{held + 50:.2f}")
        assert wallet_balance() == round(held + 50, 2)
        page.fill("#account-email", "ops@second.example")
        page.fill("#account-company", "Second <i>Reseller</i>")
        page.click("#account-create button[type=submit]")
        first_key = page.locator("#account-key-once code.secret")
        expect(first_key).to_be_visible()
        second_key = first_key.inner_text()
        status, second = http_call("GET", RESELLER + "/account", second_key)
        assert status == 200 and second["company_name"] == "Second <i>Reseller</i>", second
        page.click("#account-key-once button")
        assert second_key not in page.content(), "the new account's key stays in the page"
        expect(page.locator("#accounts-table tbody tr", has_text="Second <i>Reseller</i>")).to_have_count(1)
        check_one_line(page, "#accounts-table tbody .id", "an account id")
        inventory(page)
        check_sections(page, "operator")
        section(page, "operator", "report")
        page.select_option("#report-format", "html")
        page.click("#report-form button[type=submit]")
        frame = page.frame_locator("#report-frame")
        expect(frame.locator("h1")).to_have_text("Finance report")
        expect(frame.locator("[data-field=conserved]")).to_have_attribute("data-value", "true")
        expect(frame.locator("svg").first).to_be_visible()
        # The report's own styles apply in the frame (the CSP allows inline styles only).
        weight = frame.locator("h1").evaluate("(e) => getComputedStyle(e).fontSize")
        assert weight == "26px", weight
        step("the report frame is as tall as its document; the report explains its words")
        page.wait_for_function(
            """() => { const f = document.getElementById('report-frame'); const d = f.contentDocument;
                return d && d.readyState === 'complete' && d.documentElement.scrollHeight > 900
                    && f.getBoundingClientRect().height >= d.documentElement.scrollHeight; }"""
        )
        expect(frame.locator("h2", has_text="What the words mean")).to_have_count(1)
        for words in ["conversion dust", "forfeited", "data not yet reported", "returns on their way"]:
            expect(frame.locator("dl.words dt", has_text=words).first).to_be_visible()
        expect(frame.locator("p.meta", has_text="Rows: all 2 accounts, one row each")).to_have_count(1)
        section(page, "operator", "state")
        page.click("#state-load")
        expect(page.locator("#state")).to_contain_text("State digest")
        check_labels(page, "operator")
        section(page, "operator", "report")
        page.evaluate("() => window.scrollTo(0, 0)")
        shoot(page, "operator.png")

        step("sign out clears the credentials")
        page.click("#tab-reseller")
        page.click("#reseller-signout")
        expect(page.locator("#reseller-signin")).to_be_visible()
        assert page.evaluate("() => sessionStorage.getItem('esim.dashboard.api_key')") is None
        page.click("#tab-sandbox")
        page.locator("#sandbox-app .admin-signout").click()
        expect(page.locator("#admin-signin")).to_be_visible()
        assert page.evaluate("() => sessionStorage.getItem('esim.dashboard.admin_token')") is None

        step("390 px wide: a 100-row eSIM table does not scroll the page sideways")
        # Set-up over plain HTTP: two more keys of the demo account (the reseller API allows
        # 100 requests a minute per key), then a minute of service time for fresh windows.
        status, topped = http_call("POST", f"{BASE}/admin/v1/accounts/{demo_id}/topups", ADMIN, {"amount_usd": 500})
        assert status == 201, topped
        keys = []
        for _ in range(2):
            status, made = http_call("POST", f"{BASE}/admin/v1/accounts/{demo_id}/keys", ADMIN)
            assert status == 201, made
            keys.append(made["api_key"])
        status, listed = http_call("GET", RESELLER + "/esim/list?limit=1", keys[0])
        for n in range(100 - listed["total"]):
            status, made = http_call("POST", RESELLER + "/esim/provision", keys[n % 2],
                                     {"label": f"Traveller {n} with a rather long label to wrap", "end_user_reference": f"customer-reference-{n:04d}"})
            assert status == 201, made
        status, moved = http_call("POST", BASE + "/sandbox/v1/clock/advance", ADMIN, {"seconds": 61})
        assert status == 200, moved
        narrow = context.new_page()
        narrow.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        narrow.set_viewport_size({"width": 390, "height": 844})
        narrow.goto(BASE + "/dashboard/")
        narrow.click("#tab-reseller")
        narrow.fill("#reseller-key", keys[1])
        narrow.keyboard.press("Enter")
        expect(narrow.locator("#reseller-app")).to_be_visible()
        section(narrow, "reseller", "esims")
        narrow.select_option("#esims-limit", "100")
        narrow.click("#esims-filter button[type=submit]")
        expect(narrow.locator("#esims-table tbody tr")).to_have_count(100)
        expect(narrow.locator("#esims-range")).to_contain_text("1–100 of")
        widths = narrow.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth, window.innerWidth]")
        assert widths[0] <= widths[1], f"the page scrolls sideways at 390 px: {widths}"
        check_one_line(narrow, "#esims-table tbody .id", "an ICCID at 390 px")
        check_no_script_ran(narrow)
        narrow.screenshot(path=os.path.join(SHOTS, "reseller-390px.png"))
        narrow.click("#tab-operator")
        narrow.fill("#admin-token", ADMIN)
        narrow.keyboard.press("Enter")
        expect(narrow.locator("#accounts-table tbody tr")).to_have_count(2)
        for view in ["operator", "sandbox"]:
            narrow.click(f"#tab-{view}")
            expect(narrow.locator(f"#{view}-app")).to_be_visible()
            widths = narrow.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
            assert widths[0] <= widths[1], f"the {view} view scrolls sideways at 390 px: {widths}"

        step("revoking the key in use signs out")
        narrow.click("#tab-reseller")
        section(narrow, "reseller", "keys")
        current = narrow.locator("#keys-table tbody tr", has_text="yes")
        expect(current).to_have_count(1)
        assert keys[1].startswith(current.locator("code").inner_text().rstrip("…"))
        current.locator("button", has_text="Revoke").click()
        confirm(narrow, "key-confirm")
        expect(narrow.locator("#reseller-signin-error")).to_contain_text("You revoked the key this page used")
        expect(narrow.locator("#reseller-app")).to_be_hidden()
        assert narrow.evaluate("() => sessionStorage.getItem('esim.dashboard.api_key')") is None
        status, _ = http_call("GET", RESELLER + "/account", keys[1])
        assert status == 401, status


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"dashboard flow: {time.monotonic() - started:.1f} s", flush=True)
