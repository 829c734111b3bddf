"""The three browsers the web-audio page runs in, each through a driver that works offline with
Debian's packages (never a browser download):

- **chromium**: Debian's Chromium through Playwright (Chrome DevTools Protocol).
- **firefox**: Debian's Firefox ESR through Playwright's ``moz-firefox`` channel (WebDriver
  BiDi; no geckodriver exists as a Debian package or a wheel). Playwright 1.65 launches it but
  fails on the first page (``emulation.setMediaFeaturesOverride: unknown command``), hence the
  pin on 1.64.
- **webkit**: WebKitGTK's MiniBrowser through Selenium and ``WebKitWebDriver``, on a virtual X
  display (Xvfb) started here. WebKitGTK hides SharedArrayBuffer, so WASM threads, unless
  ``JSC_useSharedArrayBuffer=1`` is in its environment.

``launch(name)`` yields a ``Driver`` with one vocabulary whatever sits under it: ``result(url)``
opens a page and waits for its ``window.__fwbench_result``; ``evaluate(url, js)`` runs an async
function there. Any driver's failure is a ``DriverError``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from fwbench.vocab import BROWSER_LABELS, BROWSERS

_CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
FIREFOX = "/usr/bin/firefox-esr"
_WEBKIT_DRIVER = "/usr/bin/WebKitWebDriver"
_MINIBROWSER = "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--enable-unsafe-webgpu",
    "--enable-features=WebMachineLearningNeuralNetwork",
]
# Firefox's fake capture device (a tone, not a file) and no permission prompt for it
_FIREFOX_PREFS = {
    "media.navigator.streams.fake": True,
    "media.navigator.permission.disabled": True,
    "media.autoplay.default": 0,
}
# without it WebKitGTK hides SharedArrayBuffer, and onnxruntime-web runs WASM on one thread
WEBKIT_ENV = {"JSC_useSharedArrayBuffer": "1"}
_INSTALL = "`make browser` installs it (as root)"


class DriverError(RuntimeError):
    """The browser or its driver failed: the page crashed, timed out or could not be reached."""


def check_browsers(names: list[str]) -> list[str]:
    """``names`` if each is a known browser; else ValueError naming the unknown ones."""
    unknown = [n for n in names if n not in BROWSERS]
    if unknown:
        raise ValueError(f"unknown browser(s) {unknown}; choose from {list(BROWSERS)}")
    return list(names)


def _chromium_path() -> str | None:
    found = shutil.which("chromium")
    if found:
        return found
    return next((p for p in _CHROMIUM_CANDIDATES if Path(p).exists()), None)


def unavailable(name: str) -> str | None:
    """Why ``name`` cannot start here, with the command that fixes it; None if it can."""
    if name == "chromium" and _chromium_path() is None:
        return f"Chromium is not installed ({_INSTALL})"
    if name == "firefox" and not Path(FIREFOX).exists():
        return f"Firefox ESR is not installed ({_INSTALL})"
    if name == "webkit":
        missing = [p for p in (_WEBKIT_DRIVER, _MINIBROWSER) if not Path(p).exists()]
        if missing or shutil.which("Xvfb") is None:
            return f"WebKitGTK's driver, MiniBrowser or Xvfb is not installed ({_INSTALL})"
        try:
            import selenium  # noqa: F401
        except ImportError:
            return "the selenium package is missing (`pip install -e '.[dev]'` installs it)"
        return None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (`pip install -e '.[dev]'` installs it)"
    return None


class Driver:
    """One running browser. ``name`` is one of BROWSERS; ``version`` the browser's own."""

    name: str
    version: str

    def result(self, url: str, timeout_s: float) -> dict:
        raise NotImplementedError

    def evaluate(self, url: str, js: str) -> object:
        raise NotImplementedError


class _PlaywrightDriver(Driver):
    def __init__(self, name: str, browser):
        self.name, self.browser, self.version = name, browser, browser.version

    @contextlib.contextmanager
    def _page(self, url: str):
        from playwright.sync_api import Error

        page = self.browser.new_page()
        try:
            page.goto(url)
            yield page
        except Error as exc:
            raise DriverError(str(exc)) from exc
        finally:
            page.close()

    def result(self, url: str, timeout_s: float) -> dict:
        with self._page(url) as page:
            page.wait_for_function(
                "window.__fwbench_result !== undefined", timeout=timeout_s * 1000
            )
            return page.evaluate("window.__fwbench_result")

    def evaluate(self, url: str, js: str) -> object:
        with self._page(url) as page:
            return page.evaluate(js)


class _SeleniumDriver(Driver):
    def __init__(self, name: str, driver):
        self.name, self.driver = name, driver
        self.version = str(driver.capabilities.get("browserVersion", ""))

    def result(self, url: str, timeout_s: float) -> dict:
        from selenium.common.exceptions import WebDriverException

        try:
            self.driver.get(url)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                found = self.driver.execute_script("return window.__fwbench_result ?? null")
                if found is not None:
                    return found
                time.sleep(0.2)
        except WebDriverException as exc:
            raise DriverError(exc.msg or str(exc)) from exc
        raise DriverError(f"the page left no result within {timeout_s:g} s")

    def evaluate(self, url: str, js: str) -> object:
        from selenium.common.exceptions import WebDriverException

        try:
            self.driver.get(url)
            return self.driver.execute_async_script(
                f"const done = arguments[arguments.length - 1]; ({js})().then(done, "
                "e => done({error: String(e)}));"
            )
        except WebDriverException as exc:
            raise DriverError(exc.msg or str(exc)) from exc


@contextlib.contextmanager
def launch(name: str, *, chromium_args: tuple[str, ...] = (), env: dict | None = None):
    """A headless ``name`` (one of BROWSERS), closed on exit; yields its Driver.

    ``chromium_args`` are added to Chromium's command line (its fake microphone is a flag);
    ``env`` is added to Firefox's environment (the sound server its audio plays into)."""
    check_browsers([name])
    why = unavailable(name)
    if why:
        raise DriverError(why)
    if name == "webkit":
        with _webkit() as driver:
            yield driver
        return
    from playwright.sync_api import Error, sync_playwright

    with sync_playwright() as pw:
        try:
            if name == "chromium":
                browser = pw.chromium.launch(
                    executable_path=_chromium_path(), args=[*CHROMIUM_ARGS, *chromium_args]
                )
            else:
                browser = pw.firefox.launch(
                    channel="moz-firefox",
                    executable_path=FIREFOX,
                    firefox_user_prefs=_FIREFOX_PREFS,
                    env={**os.environ, **(env or {})},
                )
        except Error as exc:
            raise DriverError(f"{BROWSER_LABELS[name]} did not start: {exc}") from exc
        try:
            yield _PlaywrightDriver(name, browser)
        finally:
            browser.close()


def no_sound_server() -> str | None:
    """Why ``sound_server`` cannot start here, with the command that fixes it; None if it can."""
    if shutil.which("pulseaudio") is None:
        return f"PulseAudio is not installed ({_INSTALL})"
    return None


@contextlib.contextmanager
def sound_server(timeout_s: float = 10.0):
    """A PulseAudio server of its own that plays into a null sink; yields its address for
    ``PULSE_SERVER``. Firefox's AudioContext only runs with an audio output to clock it, and a
    machine without a sound card has none: its context stays suspended and no chunk of a stream
    reaches the page."""
    why = no_sound_server()
    if why:
        raise DriverError(why)
    with tempfile.TemporaryDirectory(prefix="fwbench-pulse-") as home:
        socket = Path(home) / "native"
        proc = subprocess.Popen(
            [
                "pulseaudio", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no",
                "-n", "--load=module-null-sink",
                f"--load=module-native-protocol-unix socket={socket} auth-anonymous=1",
            ],
            # its state and runtime folders in the temporary home, never the user's
            env={**os.environ, "HOME": home, "XDG_RUNTIME_DIR": home, "XDG_CONFIG_HOME": home},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout_s
            while not socket.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    why = (proc.communicate()[1] or "").strip().splitlines()[-1:]
                    raise DriverError(f"PulseAudio did not start: {' '.join(why) or 'no socket'}")
                time.sleep(0.05)
            yield f"unix:{socket}"
        finally:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()


@contextlib.contextmanager
def xvfb():
    """A virtual X display for a browser that needs one; yields its DISPLAY."""
    read, write = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", "1280x1024x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            number = pipe.readline().strip()
        if not number:
            raise DriverError("Xvfb did not start")
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def _webkit():
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.webkitgtk.options import Options
    from selenium.webdriver.webkitgtk.service import Service

    with xvfb() as display:
        options = Options()
        options.binary_location = _MINIBROWSER
        options.add_argument("--automation")
        env = {**os.environ, "DISPLAY": display, **WEBKIT_ENV}
        try:
            driver = webdriver.WebKitGTK(
                options=options, service=Service(executable_path=_WEBKIT_DRIVER, env=env)
            )
        except WebDriverException as exc:
            raise DriverError(f"WebKitGTK did not start: {exc.msg or exc}") from exc
        try:
            driver.set_script_timeout(120)
            yield _SeleniumDriver("webkit", driver)
        finally:
            driver.quit()
