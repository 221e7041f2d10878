// posttrain studio: the form is built from the schema the server sends (GET /api/schema); every
// change posts the values the user set to /api/check, which answers with the YAML, the
// validator's problems (shown next to their keys), the batch plan and the `posttrain train` commands.
"use strict";

const state = {
  fields: {},      // dotted path -> the field's record from the schema
  values: {},      // dotted path -> YAML text, only the keys the user set (or imported)
  base: null,      // {path, values}: the file on this machine the form started from
  yaml: "",
  inflight: false,
  again: false,
  timer: null,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

async function post(url, body) {
  const response = await fetch(url, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

// ---- the form ------------------------------------------------------------------------------

function inputFor(field) {
  let input;
  if (field.widget === "select") {
    input = el("select");
    for (const option of field.options) input.append(el("option", { value: option, text: option }));
  } else if (field.widget === "yaml") {
    input = el("textarea", { rows: "2", spellcheck: "false" });
  } else {
    input = el("input", { type: "text", spellcheck: "false" });
  }
  input.id = "f-" + field.path;
  input.dataset.path = field.path;
  for (const event of ["input", "change"]) input.addEventListener(event, () => setValue(field.path, input.value));
  return input;
}

function fieldRow(field) {
  const row = el("div", { class: "field", "data-path": field.path });
  const meta = [`type ${field.type}`, `default ${field.default_label}`];
  if (field.allowed) meta.push(`allowed: ${field.allowed}`);
  if (field.refs.length) meta.push(`same as ${field.refs.join(", ")}`);
  row.append(el("label", { for: "f-" + field.path, text: field.path }), inputFor(field));
  row.append(el("div", { class: "doc", text: field.doc + (field.todo ? `  [not implemented yet: ${field.todo}]` : "") }));
  row.append(el("div", { class: "meta", text: meta.join(" · ") }), el("div", { class: "error" }));
  if (field.todo) row.classList.add("todo");
  return row;
}

function renderItems(items, container) {
  for (const item of items) {
    if (item.section !== undefined) {
      const box = el("details", { "data-section": item.section });
      box.append(el("summary", {}, el("strong", { text: item.name }), el("span", { class: "doc", text: item.doc })));
      renderItems(item.items, box);
      container.append(box);
    } else {
      state.fields[item.path] = item;
      container.append(fieldRow(item));
    }
  }
}

function extraRows() {
  // keys an imported file holds that the schema does not have: shown so the validator's
  // "unknown key, did you mean" lands somewhere, and so they can be cleared
  const box = $("extra");
  box.replaceChildren(el("summary", {}, el("strong", { text: "keys not in the schema" })));
  const extra = Object.keys(state.values).filter((p) => !(p in state.fields));
  for (const path of extra) {
    box.append(fieldRow({ path, type: "?", default_label: "(none)", allowed: "", refs: [], widget: "text",
      doc: "posttrain has no such key: clear the value to drop it", todo: null }));
    box.querySelector(`[data-path="${CSS.escape(path)}"] input`).value = state.values[path];
  }
  box.classList.toggle("hidden", extra.length === 0);
  box.open = extra.length > 0;
}

function showValues() {
  for (const [path, field] of Object.entries(state.fields)) {
    const input = document.getElementById("f-" + path);
    const text = path in state.values ? state.values[path] : field.default;
    if (input.tagName === "SELECT" && ![...input.options].some((o) => o.value === text)) {
      input.append(el("option", { value: text, text }));
    }
    input.value = text;
  }
  extraRows();
  markSet();
}

function setValue(path, text) {
  const field = state.fields[path];
  if (field && text === field.default) delete state.values[path];
  else if (!field && text === "") delete state.values[path];
  else state.values[path] = text;
  markSet();
  schedule();
}

function markSet() {
  for (const row of document.querySelectorAll(".field")) {
    row.classList.toggle("set", row.dataset.path in state.values);
  }
  applyFilter();
}

function applyFilter() {
  const query = $("filter").value.trim().toLowerCase();
  const showTodo = $("show-todo").checked;
  const onlySet = $("only-set").checked;
  for (const row of document.querySelectorAll("#form .field")) {
    const path = row.dataset.path;
    const field = state.fields[path];
    const set = path in state.values;
    const flagged = row.classList.contains("has-error");
    const text = (path + " " + (field ? field.doc : "")).toLowerCase();
    const visible = (set || flagged || showTodo || !(field && field.todo)) && (!onlySet || set || flagged)
      && (!query || text.includes(query));
    row.classList.toggle("hidden", !visible);
  }
  for (const box of [...document.querySelectorAll("#form details[data-section]")].reverse()) {
    const shown = box.querySelector(".field:not(.hidden)") !== null;
    box.classList.toggle("hidden", !shown);
    if (query && shown) box.open = true;
  }
}

// ---- checking --------------------------------------------------------------------------------

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(check, 250);  // one check per pause in typing, not per key
}

async function check() {
  if (state.inflight) { state.again = true; return; }
  state.inflight = true;
  $("status").textContent = "checking...";
  try {
    const result = await post("/api/check", { values: state.values, name: exportName(), base: state.base });
    showResult(result);
  } catch (err) {
    $("status").textContent = "error: " + err.message;
    $("status").className = "status bad";
  } finally {
    state.inflight = false;
    if (state.again) { state.again = false; check(); }
  }
}

function showResult(result) {
  state.yaml = result.yaml;
  $("yaml").textContent = result.yaml;
  $("commands").textContent = result.commands.join("\n");
  for (const row of document.querySelectorAll(".field.has-error")) {
    row.classList.remove("has-error");
    row.querySelector(".error").textContent = "";
  }
  const list = $("problems");
  list.replaceChildren();
  for (const problem of result.problems) {
    // next to every key the problem names (a batch size that does not divide names both sizes)
    const extra = Object.keys(state.values).filter((p) => !(p in state.fields) && problem.message.startsWith(p + ":"));
    const rows = [...problem.fields, ...extra]
      .map((path) => document.querySelector(`.field[data-path="${CSS.escape(path)}"]`)).filter((row) => row);
    for (const row of rows) {
      const error = row.querySelector(".error");
      row.classList.add("has-error");
      error.textContent += (error.textContent ? "\n" : "") + problem.message;
      for (let box = row.parentElement; box && box.tagName === "DETAILS"; box = box.parentElement) box.open = true;
    }
    const item = el("li", { text: problem.message });
    if (rows.length) item.addEventListener("click", () => rows[0].scrollIntoView({ block: "center" }));
    list.append(item);
  }
  const ok = result.problems.length === 0;
  if (ok) list.append(el("li", { class: "none", text: "none: the config validates" }));
  $("plan").textContent = result.plan || (result.plan_error ? "posttrain train would stop here:\n" + result.plan_error : "(fix the problems first)");
  const status = ok ? (result.plan ? "valid" : "valid, but posttrain train would stop (see the plan)") : `${result.problems.length} problem(s)`;
  $("status").textContent = status;
  $("status").className = "status " + (ok && result.plan ? "good" : "bad");
  applyFilter();
}

// ---- import and export -----------------------------------------------------------------------

async function importConfig(body) {
  try {
    const result = await post("/api/import", body);
    state.values = { ...result.values };
    state.base = result.base ? { path: result.base, values: { ...result.values } } : null;
    showValues();
    const report = $("import-report");
    report.replaceChildren(el("p", { text: `read as a ${result.report.summary}` }));
    for (const [title, lines] of [["refused", result.report.refused], ["dropped", result.report.dropped]]) {
      if (!lines.length) continue;
      const list = el("ul");
      for (const line of lines) list.append(el("li", { text: line }));
      report.append(el("p", { text: `${title} (${lines.length}):` }), list);
    }
    check();
  } catch (err) {
    $("import-report").replaceChildren(el("p", { class: "error", text: err.message }));
  }
}

function exportName() {
  return $("export-name").value.trim() || "studio.yaml";
}

function download() {
  const link = el("a", { href: URL.createObjectURL(new Blob([state.yaml], { type: "application/yaml" })), download: exportName() });
  link.click();
  URL.revokeObjectURL(link.href);
}

async function save(overwrite = false) {
  try {
    const result = await post("/api/save", { values: state.values, path: exportName(), overwrite });
    if (result.exists && confirm(`${result.exists} exists: overwrite it?`)) return save(true);
    $("save-result").textContent = result.saved ? `saved ${result.saved}` : "not saved";
  } catch (err) {
    $("save-result").textContent = "not saved: " + err.message;
  }
}

async function start() {
  const schema = await (await fetch("/api/schema")).json();
  const form = $("form");
  form.append(el("details", { id: "extra", class: "hidden" }));
  renderItems(schema.sections, form);
  showValues();
  $("filter").addEventListener("input", applyFilter);
  $("show-todo").addEventListener("change", applyFilter);
  $("only-set").addEventListener("change", applyFilter);
  $("export-name").addEventListener("input", schedule);
  $("import-path-button").addEventListener("click", () => importConfig({ path: $("import-path").value.trim() }));
  $("import-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (file) importConfig({ name: file.name, text: await file.text() });
  });
  $("download").addEventListener("click", download);
  $("save").addEventListener("click", () => save());
  $("status").textContent = `${Object.keys(state.fields).length} keys; files are read from ${schema.cwd}`;
  if (schema.opened) {
    $("import-path").value = schema.opened;
    await importConfig({ path: schema.opened });
  } else {
    check();
  }
}

start();
