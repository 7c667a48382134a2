"""The package's commands as an installed package exposes them, run for real.

``polite-report`` and ``polite-fleet`` come in three forms (console script,
``scrapy polite-…``, ``python -m scrapy_polite …``) sharing one parser and one
run function; ``scrapy polite-settings`` answers as a crawl sees the settings (Scrapy's own
``settings`` command is left alone); and
``scrapy polite-tune`` accepts a spider whose custom_settings enable the add-on.

The test environments have the package installed in editable mode from another
checkout, so the entry points come from a wheel built from this one: its
``*.dist-info`` is put first on PYTHONPATH, before this checkout's sources.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from conftest import ROOT, crawl
from example_project.spiders.catalogue import CatalogueSpider

import scrapy_polite
from scrapy_polite.sandbox import ProxyConfig, SandboxConfig, SiteConfig

EXAMPLE = ROOT / "example_project"
TIMEOUT = 60


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of this checkout, built from a copy (the checkout gets no build/ or egg-info)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.cfg", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "scrapy_polite", src / "scrapy_polite",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(out), str(src)],
                   check=True, capture_output=True, timeout=120)
    (path,) = out.glob("scrapy_polite-*.whl")
    return path


@pytest.fixture(scope="module")
def installed_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for subprocesses: the wheel's metadata (entry points) first, then this checkout."""
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site, [n for n in zf.namelist() if ".dist-info/" in n])
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return env


def entry_points(wheel: Path) -> dict[str, dict[str, str]]:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = zf.read(name).decode()
    groups: dict[str, dict[str, str]] = {}
    group = ""
    for line in text.splitlines():
        if line.startswith("["):
            group = line.strip("[]")
            groups[group] = {}
        elif "=" in line:
            key, value = (part.strip() for part in line.split("=", 1))
            groups[group][key] = value
    return groups


#: Runs a console script as its installed wrapper does: the entry point's function, sys.exit of its result.
CONSOLE_SCRIPT = (
    "import sys; from importlib.metadata import entry_points; "
    "(ep,) = entry_points(group='console_scripts', name=sys.argv[1]); "
    "sys.argv = sys.argv[1:]; sys.exit(ep.load()())"
)


def forms(command: str) -> dict[str, list[str]]:
    """The three command lines of *command* (report, fleet), without their arguments."""
    return {
        "console script": [sys.executable, "-c", CONSOLE_SCRIPT, f"polite-{command}"],
        "scrapy command": [sys.executable, "-m", "scrapy", f"polite-{command}"],
        "python -m": [sys.executable, "-m", "scrapy_polite", command],
    }


def run(cmd: list[str], env: dict[str, str], cwd: Path = EXAMPLE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)


def shown(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-3000:]}"


@pytest.mark.once
def test_the_wheel_declares_its_commands_license_types_and_dependencies(wheel: Path) -> None:
    eps = entry_points(wheel)
    assert eps["console_scripts"] == {"polite-report": "scrapy_polite.cli.report:main",
                                      "polite-fleet": "scrapy_polite.cli.fleet:main"}
    assert eps["scrapy.commands"] == {
        "polite-tune": "scrapy_polite.cli.tune:Command",
        "polite-report": "scrapy_polite.cli.report:Command",
        "polite-fleet": "scrapy_polite.cli.fleet:Command",
        "polite-settings": "scrapy_polite.cli.settings:Command",
    }
    # None of them replaces one of Scrapy's own commands (an entry point of the same name would,
    # in every project of the environment).
    import pkgutil

    import scrapy.commands

    builtin = {m.name.replace("_", "-") for m in pkgutil.iter_modules(scrapy.commands.__path__)}
    assert "settings" in builtin and not builtin & set(eps["scrapy.commands"])
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = zf.read(meta).decode().split("\n\n", 1)[0].splitlines()
    assert "scrapy_polite/py.typed" in names
    assert "scrapy_polite/gate/redis/lua/acquire.lua" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    fields: dict[str, list[str]] = {}
    for line in headers:
        key, _, value = line.partition(": ")
        fields.setdefault(key, []).append(value)
    assert fields["Version"] == [scrapy_polite.__version__]
    assert fields["License-Expression"] == ["BSD-3-Clause"]
    assert {f"Programming Language :: Python :: 3.{v}" for v in (10, 11, 12, 13)} <= set(fields["Classifier"])
    assert "Framework :: Scrapy" in fields["Classifier"]
    requires = {re.split(r"[<>=;\s]", r, maxsplit=1)[0].lower() for r in fields["Requires-Dist"]
                if "extra ==" not in r}
    # What the package imports at run time, beyond the standard library.
    assert requires == {"scrapy", "hdrhistogram", "twisted", "protego"}  # the lab's cryptography is an extra
    # Extras are features for users; the test, lint and bench tools are dependency groups.
    assert set(fields["Provides-Extra"]) == {"sandbox", "prometheus", "connect-headers", "redis", "splash", "playwright"}


@pytest.mark.parametrize(("command", "expected"), [
    ("report", ["jsonl", "--output", "--title", "POLITE_STATS_JSONL"]),
    ("fleet", ["url", "--namespace", "--json", "--clear", "POLITE_STATE"]),
])
def test_help_of_each_form(installed_env: dict[str, str], command: str, expected: list[str]) -> None:
    for form, cmd in forms(command).items():
        proc = run([*cmd, "--help"], installed_env)
        assert proc.returncode == 0, (form, shown(proc))
        for word in expected:
            assert word in proc.stdout, (form, word, proc.stdout)
    listing = run([sys.executable, "-m", "scrapy", "-h"], installed_env)
    assert re.search(rf"^\s+polite-{command}\s+\S", listing.stdout, re.M), shown(listing)


@pytest.mark.once
def test_python_m_lists_each_command_with_its_parsers_usage(installed_env: dict[str, str]) -> None:
    bare = run([sys.executable, "-m", "scrapy_polite"], installed_env)
    assert bare.returncode == 2, shown(bare)
    assert re.search(r"^usage: python -m scrapy_polite report .*--title TITLE", bare.stdout, re.M | re.S)
    assert re.search(r"^  fleet +Fleet-wide stats", bare.stdout, re.M), bare.stdout
    unknown = run([sys.executable, "-m", "scrapy_polite", "nope"], installed_env)
    assert unknown.returncode == 2 and "unknown command 'nope'" in unknown.stderr, shown(unknown)


@pytest_twisted.ensureDeferred
async def test_report_of_a_real_crawl_in_each_form(sandbox, tmp_path: Path, installed_env: dict[str, str]) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=6)], proxies=ProxyConfig(count=3)))
    jsonl = tmp_path / "attempts.jsonl"
    await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.05, 0.1),
                                  "POLITE_STATS_JSONL": str(jsonl)}, start_url=sb.site_url("a"))
    sent = len(sb.log())
    ok = sum(1 for e in sb.log() if e["status"] == 200)
    for i, (form, cmd) in enumerate(forms("report").items()):
        html = tmp_path / f"report{i}.html"
        proc = run([*cmd, str(jsonl), "-o", str(html), "--title", f"run {i}"], installed_env)
        assert proc.returncode == 0, (form, shown(proc))
        assert f"{sent} records, {ok} successful pages" in proc.stdout, (form, proc.stdout)
        page = html.read_text()
        assert page.startswith("<!DOCTYPE html>") and f"run {i}" in page, form
    bad = run([*forms("report")["scrapy command"], str(tmp_path / "missing.jsonl")], installed_env)
    assert bad.returncode == 2 and "missing.jsonl" in bad.stderr, shown(bad)


@pytest_twisted.ensureDeferred
async def test_fleet_against_a_real_redis_in_each_form(sandbox, redis_server, installed_env: dict[str, str]) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=4)], proxies=ProxyConfig(count=2)))
    result = await crawl(CatalogueSpider, {"POLITE_PROXIES": sb.proxy_urls, "POLITE_DELAY": (0.05, 0.1),
                                           "POLITE_STATE": redis_server.url, "POLITE_STATE_NAMESPACE": "cmd"},
                         start_url=sb.site_url("a"))
    ok = sum(1 for e in sb.log() if e["status"] == 200)
    assert ok == result.stats["polite/success"] > 0
    for form, cmd in forms("fleet").items():
        proc = run([*cmd, redis_server.url, "--namespace", "cmd", "--json"], installed_env)
        assert proc.returncode == 0, (form, shown(proc))
        merged: dict[str, Any] = json.loads(proc.stdout)
        assert (merged["processes"], merged["success"], merged["attempts"]) == (1, ok, len(sb.log())), form
        text = run([*cmd, redis_server.url, "--namespace", "cmd"], installed_env)
        assert text.returncode == 0 and "1 process(es), 0 running" in text.stdout, (form, shown(text))
    cleared = run([*forms("fleet")["console script"], redis_server.url, "--namespace", "cmd", "--clear"],
                  installed_env)
    assert "cleared 1 snapshot(s)" in cleared.stdout, shown(cleared)
    empty = run([*forms("fleet")["scrapy command"], redis_server.url, "--namespace", "cmd"], installed_env)
    assert empty.returncode == 1 and "no process has published stats" in empty.stderr, shown(empty)


# -- scrapy polite-settings -----------------------------------------------------


def make_project(root: Path, settings: str, spider: str = "") -> Path:
    """A Scrapy project in *root*: scrapy.cfg, a settings module and a spider module."""
    pkg = root / "proj"
    (pkg / "spiders").mkdir(parents=True)
    (root / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "settings.py").write_text('SPIDER_MODULES = ["proj.spiders"]\n' + settings)
    (pkg / "spiders" / "__init__.py").write_text(spider)
    return root


def test_polite_settings_answers_as_a_crawl_sees_them(tmp_path: Path, installed_env: dict[str, str]) -> None:
    from scrapy_polite.settings.config import DEFAULTS

    def get(cwd: Path, name: str, *args: str, command: str = "polite-settings") -> str:
        proc = run([sys.executable, "-m", "scrapy", command, "--get", name, *args], installed_env, cwd=cwd)
        assert proc.returncode == 0, shown(proc)
        return proc.stdout.strip()

    polite = make_project(tmp_path / "polite", 'ADDONS = {"scrapy_polite.Addon": 500}\n')
    assert get(polite, "POLITE_DELAY") == str(DEFAULTS["POLITE_DELAY"]) == "(0.8, 1.6)"
    assert get(polite, "POLITE_RATE_LIMIT_CODES") == "[429]"
    # What the add-on takes over for a crawl: 429 is no longer retried at once by RetryMiddleware.
    retried = get(polite, "RETRY_HTTP_CODES")
    assert "503" in retried and "429" not in retried
    # Nothing the user set is overridden: the command line, nor the project's own value.
    assert get(polite, "POLITE_DELAY", "-s", "POLITE_DELAY=0.3,0.5") == "0.3,0.5"
    assert get(EXAMPLE, "POLITE_LOG_INTERVAL") == "10"
    assert get(EXAMPLE, "POLITE_COOLDOWN") == "(5.0, 10.0)"
    # Scrapy's own settings still answer; a project without the add-on gets no POLITE_* values.
    assert get(polite, "CONCURRENT_REQUESTS") == "16"
    plain = make_project(tmp_path / "plain", "")
    assert get(plain, "POLITE_DELAY") == "None"
    assert get(plain, "DOWNLOAD_DELAY") == "0"
    # Scrapy's own command is Scrapy's: the project settings as written, add-ons not applied.
    assert get(polite, "POLITE_DELAY", command="settings") == "None"
    assert "429" in get(polite, "RETRY_HTTP_CODES", command="settings")


# -- scrapy polite-tune ---------------------------------------------------------

SPIDER_WITH_CUSTOM_SETTINGS = '''
import os

from example_project.spiders.catalogue import CatalogueSpider


class Probe(CatalogueSpider):
    """The pool (and, unless the project enables it, the add-on) in custom_settings."""

    name = "probe"
    custom_settings = {
        "POLITE_PROXIES": os.environ["PROBE_PROXIES"].split(),
        **({} if os.environ.get("PROBE_ADDON_IN_PROJECT") else {"ADDONS": {"scrapy_polite.Addon": 500}}),
    }
'''


@pytest.mark.parametrize("addon_in_project", [False, True], ids=["addon-in-spider", "addon-in-project"])
def test_tune_accepts_a_spider_that_sets_the_addon_or_proxies_in_custom_settings(
    sandbox, tmp_path: Path, installed_env: dict[str, str], addon_in_project: bool
) -> None:
    sb = sandbox(SandboxConfig(sites=[SiteConfig(name="a", pages=20)], proxies=ProxyConfig(count=3)))
    settings = "ROBOTSTXT_OBEY = False\nTELNETCONSOLE_ENABLED = False\n"
    if addon_in_project:
        settings += 'ADDONS = {"scrapy_polite.Addon": 500}\n'
    project = make_project(tmp_path / "tuned", settings, SPIDER_WITH_CUSTOM_SETTINGS)
    env = {**installed_env, "PROBE_PROXIES": " ".join(sb.proxy_urls),
           "PYTHONPATH": installed_env["PYTHONPATH"] + os.pathsep + str(EXAMPLE)}
    if addon_in_project:
        env["PROBE_ADDON_IN_PROJECT"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "scrapy", "polite-tune", "probe", "-a", f"start_url={sb.site_url('a')}",
         "-s", "DOWNLOAD_TIMEOUT=5", "--budget", "12", "--trial-requests", "12", "--trial-seconds", "8"],
        cwd=project, env=env, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, shown(proc)
    assert "3 endpoint(s)" in proc.stdout and "Recommended settings.py lines" in proc.stdout, shown(proc)
    used = re.search(r"^Used (\d+) of 12 requests in 1 trial", proc.stdout, re.M)
    assert used, shown(proc)
    log = sb.log()
    # The trial crawled through the pool its spider's custom_settings list, within its allowance.
    assert 0 < len(log) <= int(used.group(1)) <= 12
    assert {e["ip"] for e in log} <= set(sb.proxy_exit_ips)
