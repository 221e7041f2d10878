"""`posttrain studio` in a real headless Chromium (the system's, driven by Selenium through the
system's chromedriver; nothing is downloaded): open a verl file, change fields, see an error appear
next to a bad value and go away, filter, export, and load the exported YAML."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from studio_helpers import serve, tiny_files

from posttrain.config.load import load_config

VERL = """\
data:
  train_files: {d}/data/train.parquet
  train_batch_size: 4
  max_prompt_length: 32
  max_response_length: 6
actor_rollout_ref:
  model:
    path: {d}/model
  actor:
    ppo_mini_batch_size: 4
    ppo_micro_batch_size_per_gpu: 8
    optim:
      lr: 1e-4
  rollout:
    n: 2
algorithm:
  adv_estimator: grpo
trainer:
  total_training_steps: 1
  logger: ['console']
  default_local_dir: {d}/run
  n_gpus_per_node: 0
"""


def _system_chromium() -> tuple[str, str]:
    """(browser, chromedriver) installed on this machine, else the test is skipped saying which is missing."""
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing = " and ".join(n for n, p in (("Chromium", browser), ("chromedriver", driver)) if p is None)
        pytest.skip(f"no {missing} installed (Debian: apt-get install chromium chromium-driver; .ci/run installs them)")
    return browser, driver


@pytest.fixture
def browser():
    binary, driver_path = _system_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _reveal(driver, css: str):
    """The element, with its sections opened as a user opens them and scrolled into view."""
    field = driver.find_element("css selector", css)
    # open the field's sections as a user does: a click on each closed one's title, outermost first
    boxes = driver.execute_script(
        "const out = []; for (let b = arguments[0].closest('details'); b; b = b.parentElement.closest('details')) out.unshift(b);"
        " return out;", field)
    for box in boxes:
        if not box.get_attribute("open"):
            box.find_element("css selector", ":scope > summary").click()
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", field)
    return field


def _type(driver, css: str, text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    field = _reveal(driver, css)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE)
    field.send_keys(text)


def _wait(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 120, poll_frequency=0.2).until(condition, message=f"waited for {what}")


def _text(driver, css: str) -> str:
    return driver.find_element("css selector", css).get_attribute("textContent")


def _error(driver, path: str) -> str:
    return _text(driver, f'.field[data-path="{path}"] .error')


def test_build_a_config_in_the_page(browser, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the server runs in this process: "save here" writes into tmp_path
    tiny_files(tmp_path)
    verl = tmp_path / "verl.yaml"
    verl.write_text(VERL.format(d=tmp_path))
    server = serve(cwd=str(tmp_path))
    _, client = next(server)
    try:
        browser.get(client.url)
        _wait(browser, lambda d: _text(d, "#yaml").startswith("# posttrain config"), "the form's first check")
        assert len(browser.find_elements("css selector", "#form .field")) > 300  # every implemented key, at least

        # open the verl file: translated, checked, planned
        _type(browser, "#import-path", str(verl))
        browser.find_element("id", "import-path-button").click()
        _wait(browser, lambda d: "read as a verl config" in _text(d, "#import-report"), "the import report")
        _wait(browser, lambda d: _text(d, "#status") == "valid", "the imported config to validate")
        assert "prompts per step" in _text(browser, "#plan")
        lr = '.field[data-path="actor.optim.lr"] input'
        assert browser.find_element("css selector", lr).get_attribute("value") == "0.0001"

        # a bad value: the validator's message appears next to the key, and the plan waits
        _type(browser, lr, "-1")
        _wait(browser, lambda d: "must be > 0" in _error(d, "actor.optim.lr"), "the error next to actor.optim.lr")
        assert "problem" in _text(browser, "#status") and "fix the problems" in _text(browser, "#plan")
        # a batch size that does not divide: shown next to both sizes it names
        _type(browser, lr, "2e-5")
        _type(browser, '.field[data-path="actor.ppo_mini_batch_size"] input', "3")
        _wait(browser, lambda d: "not divisible" in _error(d, "data.train_batch_size"), "the cross-field error")
        assert "not divisible" in _error(browser, "actor.ppo_mini_batch_size") and _error(browser, "actor.optim.lr") == ""
        _type(browser, '.field[data-path="actor.ppo_mini_batch_size"] input', "2")
        _type(browser, '.field[data-path="rollout.n"] input', "4")
        from selenium.webdriver.support.ui import Select

        Select(_reveal(browser, '.field[data-path="trainer.val_before_train"] select')).select_by_value("false")
        _wait(browser, lambda d: _text(d, "#status") == "valid" and re.search(r"^responses per step +16 ", _text(d, "#plan"), re.M),
              "the plan of 4 prompts x 4 responses")
        assert re.search(r"^actor mini-batches/epoch +2 ", _text(browser, "#plan"), re.M)  # 4 prompts / mini-batches of 2

        # filter: only the matching keys stay visible
        _type(browser, "#filter", "ppo_epochs")
        assert browser.find_element("css selector", '.field[data-path="actor.ppo_epochs"]').is_displayed()
        assert not browser.find_element("css selector", '.field[data-path="actor.optim.lr"]').is_displayed()
        _type(browser, "#filter", "")

        # export: the YAML shown, the file saved here, and the command that runs it
        _type(browser, "#export-name", "exported.yaml")
        _wait(browser, lambda d: "posttrain train exported.yaml" in _text(d, "#commands"), "the command line")
        commands = _text(browser, "#commands").splitlines()
        assert commands[1].startswith(f"posttrain train {verl} ")
        browser.find_element("id", "save").click()
        _wait(browser, lambda d: "saved" in _text(d, "#save-result"), "the save")
        saved = tmp_path / "exported.yaml"
        assert saved.read_text() == _text(browser, "#yaml")
        cfg = load_config(saved)
        assert (cfg.actor.optim.lr, cfg.actor.ppo_mini_batch_size, cfg.rollout.n, cfg.trainer.val_before_train) == (2e-5, 2, 4, False)
        assert cfg.model.path == str(tmp_path / "model")
        # the override command is the same config as the exported file
        assert load_config(verl, commands[1].split()[3:]) == cfg
    finally:
        server.close()
    assert os.path.exists(saved)
