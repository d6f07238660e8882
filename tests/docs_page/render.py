"""The front door and the API reference in a real headless Chromium (Debian's), run by
tests/docs_page.rs.

Usage: render.py BASE_URL SCREENSHOT_DIR OUT_JSON

For each of the three OpenAPI documents, /docs/?api=NAME must render every operation of
the document (Redoc's section `operation/<operationId>`) with no console error, no CSP
violation, no failed request and no request off this origin; the landing page (/) must show
its links with none of those either, and its "API reference" link must lead to the page.
Exits non-zero on the first failure; writes what it counted to OUT_JSON.
"""

import json
import os
import sys
import tempfile
import urllib.request

from playwright.sync_api import sync_playwright

BASE, SHOTS, OUT = sys.argv[1:4]
DOCUMENTS = {
    "reseller": "/api/v2/reseller/openapi.json",
    "admin": "/admin/v1/openapi.json",
    "sandbox": "/sandbox/v1/openapi.json",
}
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 30_000
# Every CSP violation the page sees, recorded before any of its own scripts runs.
WATCH_CSP = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(e.violatedDirective + " " + e.blockedURI);
});
"""
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def operation_ids(path):
    with urllib.request.urlopen(BASE + path, timeout=10) as answer:
        document = json.load(answer)
    return [op["operationId"] for item in document["paths"].values()
            for method, op in item.items() if method in METHODS]


def watch(page, problems):
    """Console errors, page errors, failed or off-origin requests and error statuses."""
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))

    def response(answer):
        if answer.status >= 400:
            problems.append(f"{answer.status} for {answer.url}")

    def request(sent):
        if not (sent.url.startswith(BASE + "/") or sent.url.startswith(("data:", "blob:"))):
            problems.append(f"a request off this origin: {sent.url}")

    page.on("response", response)
    page.on("request", request)


def check_reference(page, api, problems, counted):
    expected = operation_ids(DOCUMENTS[api])
    page.goto(f"{BASE}/docs/?api={api}")
    page.wait_for_selector(f"body[data-rendered='{api}']", timeout=TIMEOUT_MS)
    rendered = page.evaluate(
        "ids => ids.filter(id => document.querySelector(`[data-section-id='operation/${id}']`))", expected)
    missing = sorted(set(expected) - set(rendered))
    if missing:
        problems.append(f"{api}: operations not rendered: {missing}")
    menu = page.locator("li[data-item-id*='operation/']").count()
    if menu < len(expected):
        problems.append(f"{api}: the menu lists {menu} operations of {len(expected)}")
    current = page.get_attribute(f"#api-{api}", "aria-current")
    if current != "page":
        problems.append(f"{api}: the switcher does not mark it ({current!r})")
    if page.get_attribute("#document", "href") != DOCUMENTS[api]:
        problems.append(f"{api}: the document link is not {DOCUMENTS[api]}")
    page.wait_for_timeout(500)  # let late workers and images report
    problems.extend(f"{api}: CSP violation {v}" for v in page.evaluate("window.__csp"))
    page.screenshot(path=os.path.join(SHOTS, f"docs-{api}.png"))
    counted[api] = {"operations": len(expected), "rendered": len(rendered), "menu": menu}
    print(f"docs page: {api}: {len(rendered)} of {len(expected)} operations rendered", flush=True)


def check_landing(page, problems, counted):
    page.goto(BASE + "/")
    if page.title() != "Reseller eSIM Connectivity Service":
        problems.append(f"landing page title: {page.title()!r}")
    hrefs = page.eval_on_selector_all("a", "links => links.map(a => a.getAttribute('href'))")
    for wanted in ["/dashboard/", "/docs/", "/healthz", *DOCUMENTS.values()]:
        if wanted not in hrefs:
            problems.append(f"the landing page does not link {wanted}: {hrefs}")
    page.screenshot(path=os.path.join(SHOTS, "landing.png"))
    problems.extend(f"landing: CSP violation {v}" for v in page.evaluate("window.__csp"))
    page.click("text=API reference")
    page.wait_for_selector("body[data-rendered='reseller']", timeout=TIMEOUT_MS)
    counted["landing_links"] = len(hrefs)
    print("docs page: the landing page links the reference", flush=True)


def main():
    os.makedirs(SHOTS, exist_ok=True)
    problems, counted = [], {}
    with sync_playwright() as driver, tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        context = driver.chromium.launch_persistent_context(
            profile, executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(TIMEOUT_MS)
        context.add_init_script(WATCH_CSP)
        page = context.pages[0] if context.pages else context.new_page()
        watch(page, problems)
        try:
            for api in DOCUMENTS:
                check_reference(page, api, problems, counted)
            check_landing(page, problems, counted)
        except BaseException:
            page.screenshot(path=os.path.join(SHOTS, "docs-failure.png"), full_page=False)
            raise
        context.close()
    with open(OUT, "w") as handle:
        json.dump({"problems": problems, "counted": counted}, handle)
    assert not problems, "\n".join(problems)
    print("docs page: all passed", flush=True)


main()
