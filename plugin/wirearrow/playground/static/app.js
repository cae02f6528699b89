// The playground page: plain JavaScript, no library, no build step. It talks to the JSON
// API of wirearrow/playground/server.py; every answer is either data or {"error": ...}.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { mode: "yaml", planName: "plan.yaml", timer: null, seq: 0, limits: {}, recordsFrom: null };

// body: a JSON value, or a Blob sent as it is (an uploaded file's bytes).
async function api(path, body) {
  const options = body === undefined ? {} : body instanceof Blob ? {
    method: "POST", headers: { "Content-Type": "application/octet-stream" }, body,
  } : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  let response;
  try {
    response = await fetch(path, options);
  } catch (err) {
    throw new Error("the playground server does not answer (was it stopped?)");
  }
  const type = response.headers.get("Content-Type") || "";
  if (type.startsWith("application/json")) {
    const data = await response.json();
    if (!response.ok || data.error) throw new Error(data.error || response.statusText);
    return data;
  }
  if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
  return response;
}

function banner(message) {
  const box = $("error-banner");
  box.textContent = message || "";
  box.hidden = !message;
}

function status(text, ok) {
  const el = $("status");
  el.textContent = text;
  el.className = "status " + (ok === undefined ? "" : ok ? "ok" : "bad");
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

// ---- the schema tree ----------------------------------------------------------------

function renderTree(tree) {
  const box = $("schema-tree");
  box.replaceChildren();
  if (!tree) {
    $("schema-name").textContent = "no schema yet";
    return;
  }
  $("schema-name").textContent = tree.message + (tree.cut ? " (cut: a very large schema)" : "");
  box.append(fieldList(tree.fields));
}

function fieldList(fields) {
  const list = el("ul");
  for (const f of fields) {
    const tags = [];
    if (f.repeated) tags.push("repeated");
    if (f.kind === "map") tags.push("map");
    if (f.oneof) tags.push("oneof " + f.oneof);
    if (f.recursive) tags.push("recursive");
    const target = f.kind === "map" && !f.fields.length ? f.value_path : f.path;
    const label = el("span", {
      class: "field", "data-path": target, title: "add a column: " + target,
      onclick: () => addColumn(target),
    }, f.name);
    const item = el("li", {}, label, " ", el("span", { class: "type" }, f.type),
      ...tags.map((t) => el("span", { class: "tag" }, t)));
    if (f.fields.length) item.append(fieldList(f.fields));
    list.append(item);
  }
  return list;
}

async function addColumn(path) {
  try {
    const data = await api("/api/add_column", { plan: $("plan").value, mode: state.mode, path });
    $("plan").value = data.plan;
    $("plan").scrollTop = $("plan").scrollHeight; // the new column is at the end
    renderGutter([]);
    schedulePreview(0);
  } catch (err) {
    banner(err.message);
  }
}

// ---- the editor -----------------------------------------------------------------------

function renderGutter(problems) {
  const bad = new Map();
  for (const p of problems) if (p.line) bad.set(p.line, (bad.get(p.line) || "") + p.text + "\n");
  const count = $("plan").value.split("\n").length;
  const gutter = $("gutter");
  gutter.replaceChildren();
  for (let i = 1; i <= count; i++) {
    const attrs = bad.has(i) ? { class: "bad", title: bad.get(i) } : {};
    gutter.append(el("span", attrs, String(i)), "\n");
  }
  gutter.scrollTop = $("plan").scrollTop;
}

function jumpTo(line) {
  const area = $("plan");
  const lines = area.value.split("\n");
  let start = 0;
  for (let i = 0; i < line - 1 && i < lines.length; i++) start += lines[i].length + 1;
  area.focus();
  area.setSelectionRange(start, start + (lines[line - 1] || "").length);
  area.scrollTop = Math.max(0, (line - 3) * 18);
}

function renderProblems(problems) {
  const box = $("problems");
  box.replaceChildren();
  if (!problems.length) {
    box.append(el("div", { class: "fine" }, "no problems: the plan compiles"));
    return;
  }
  for (const p of problems) {
    const attrs = { class: "problem", "data-line": p.line || "" };
    if (p.line) attrs.onclick = () => jumpTo(p.line);
    box.append(el("div", attrs, p.text));
  }
}

function setMode(mode) {
  state.mode = mode;
  $("mode-yaml").checked = mode === "yaml";
  $("mode-lines").checked = mode === "lines";
  $("mode-help").textContent = mode === "yaml"
    ? "a YAML plan, checked as `wirearrow check` does"
    : "one column per line: path, name = path, or name = func(args, sep=\"x\"); none: whole messages";
}

// From the short format to YAML the plan is carried over (as its download would be); the
// other way the text is kept, since a YAML plan can say more than one column per line.
async function changeMode(mode) {
  if (mode === "yaml" && state.mode === "lines" && $("plan").value.trim()) {
    try {
      const response = await api("/api/download", { plan: $("plan").value, mode: "lines", format: "yaml" });
      $("plan").value = await response.text();
    } catch (err) {
      banner(err.message);
    }
  }
  setMode(mode);
  renderGutter([]);
  schedulePreview(0);
}

function schedulePreview(delay) {
  clearTimeout(state.timer);
  state.timer = setTimeout(preview, delay === undefined ? 300 : delay);
}

async function preview() {
  const seq = ++state.seq;
  status("checking…");
  let data;
  try {
    data = await api("/api/preview", {
      plan: $("plan").value, mode: state.mode, record: Number($("record-index").value) || 0,
    });
  } catch (err) {
    if (seq === state.seq) { banner(err.message); status("error", false); }
    return;
  }
  if (seq !== state.seq) return; // a newer edit is on its way
  banner("");
  if (data.schema) renderTree(data.schema);
  renderRecords(data.records);
  renderGutter(data.problems);
  renderProblems(data.problems);
  renderHint(data.hint);
  $("output").classList.toggle("stale", !data.preview || Boolean(data.stale));
  if (data.preview) {
    renderPreview(data.preview);
    renderNested(data.nested);
  } else {
    $("preview-table").replaceChildren();
    $("dead-letters").replaceChildren();
    $("nested").textContent = "";
  }
  if (data.problems.length) {
    $("preview-summary").textContent = data.preview
      ? "The plan has problems: below is the preview of the last plan that compiled. " +
        $("preview-summary").textContent
      : "The plan has problems, and no plan has compiled yet: fix them to see a preview.";
    status(`${data.problems.length} problem(s)`, false);
  } else {
    status(`${data.preview.num_rows} rows from ${data.preview.num_records} records`, true);
  }
  if (data.hint) $("preview-summary").append(el("div", { class: "hint wrap" }, data.hint));
}

// Most records fail: what the bytes look like (another framing, compression, JSON).
function renderHint(hint) {
  const box = $("framing-hint");
  box.textContent = hint || "";
  box.hidden = !hint;
}

// ---- the preview ------------------------------------------------------------------------

function cell(value, attrs) {
  if (value === null || value === undefined) return el("td", { class: "null" }, "null");
  const text = typeof value === "object" ? JSON.stringify(value) : String(value);
  return el("td", attrs || {}, text);
}

function renderPreview(p) {
  const fanout = p.rows_per_record;
  const sum = fanout.reduce((a, b) => a + b, 0);
  const spread = fanout.length
    ? `rows per record: min ${Math.min(...fanout)}, mean ${(sum / fanout.length).toFixed(2)}, ` +
      `max ${Math.max(...fanout)} (first ${fanout.length} records)`
    : "";
  $("preview-summary").textContent =
    `${p.num_records} records in, ${p.num_rows} rows out, ${p.failed} failed; ` +
    `showing ${p.rows.length} rows. ${spread}`;
  const table = $("preview-table");
  table.replaceChildren();
  const head = el("tr", {}, ...p.columns.map((c) =>
    el("th", { "data-name": c.name }, c.name, el("span", { class: "type" }, c.type))));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  for (const row of p.rows) body.append(el("tr", {}, ...row.map(cell)));
  table.append(body);
  const dead = $("dead-letters");
  dead.replaceChildren();
  if (!p.dead_letters.length) {
    dead.append(el("tr", {}, el("td", { class: "null" }, "none")));
    return;
  }
  dead.append(el("thead", {}, el("tr", {}, ...["record", "frame at byte", "offset in record", "path", "reason"]
    .map((h) => el("th", {}, h)))));
  const rows = el("tbody");
  for (const d of p.dead_letters) {
    rows.append(el("tr", {}, cell(d.record), cell(d.frame_offset), cell(d.offset), cell(d.path),
      cell(d.reason, { class: "reason" })));
  }
  dead.append(rows);
}

function renderNested(n) {
  const box = $("nested");
  if (!n) { box.textContent = "no records"; return; }
  const head = `record ${n.record}: ${n.size} bytes, frame at byte ${n.frame_offset}\n`;
  box.textContent = head + (n.error ? "error: " + n.error : JSON.stringify(n.value, null, 2));
}

function renderRecords(r) {
  if (!r) return;
  const parts = [r.source ? `${r.records} records (${r.bytes} bytes) from ${r.source}` : "no records yet"];
  if (r.format === "json") parts.push("protojson");
  else if (r.framing) parts.push(r.framing);
  if (r.note) parts.push(r.note);
  $("records-info").textContent = parts.join("; ");
}

// ---- how the records are read: RecordFormat's fields, as the server describes them ----

function renderInputFields(fields) {
  const box = $("input-fields");
  if (!box.children.length) {
    for (const f of fields) {
      const id = "input-" + f.name;
      let control;
      if (f.name === "schema_id") {
        control = el("input", { placeholder: "a column for each row's id, e.g. _schema_id" });
      } else if (typeof f.default === "boolean") {
        control = el("input", { type: "checkbox" });
      } else {
        control = el("select");
        if (f.default === null) control.append(el("option", { value: "" }, "(default)"));
        for (const c of f.choices) control.append(el("option", { value: c }, c));
      }
      control.id = id;
      control.dataset.field = f.name;
      control.title = f.doc;
      control.addEventListener("change", inputChanged);
      box.append(el("label", { for: id, title: f.doc, id: "label-" + f.name }, f.name.replaceAll("_", " ")), control);
    }
  }
  for (const f of fields) {
    const control = $("input-" + f.name);
    if (control.type === "checkbox") control.checked = f.value === true;
    else if (f.name === "schema_id") control.value = f.value === true ? "_schema_id" : f.value || "";
    else control.value = f.value === null ? "" : f.value;
  }
  showInputFields();
}

// A field shows where it means something: framing for binary records, the Confluent
// fields for framing confluent, ignore_unknown_fields for JSON.
function relevant(name) {
  const format = $("input-format").value;
  const confluent = format === "binary" && $("input-framing").value === "confluent";
  if (name === "framing") return format === "binary";
  if (name === "delimited_by" || name === "schema_id") return confluent;
  if (name === "ignore_unknown_fields") return format === "json";
  return true;
}

function showInputFields() {
  for (const control of $("input-fields").querySelectorAll("[data-field]")) {
    const show = relevant(control.dataset.field);
    control.hidden = !show;
    $("label-" + control.dataset.field).hidden = !show;
  }
}

function inputValues() {
  const values = {};
  for (const control of $("input-fields").querySelectorAll("[data-field]")) {
    const name = control.dataset.field;
    if (!relevant(name)) continue;
    const value = control.type === "checkbox" ? control.checked : control.value.trim();
    if (value !== "" && value !== false) values[name] = value;
  }
  return values;
}

// Another framing, format or compression: the same records (file or upload) read again.
async function inputChanged() {
  showInputFields();
  if (!state.recordsFrom) return;
  try {
    applyState(await api("/api/records", { kind: "again", ...inputValues() }));
    banner("");
    schedulePreview(0);
  } catch (err) {
    banner(err.message);
  }
}

// The file's first bytes (all a sample can use: the page never sends a whole large file).
async function upload(file) {
  const params = new URLSearchParams({ name: file.name, size: String(file.size), ...inputValues() });
  const part = file.slice(0, Math.min(file.size, state.limits.max_upload || file.size));
  try {
    applyState(await api("/api/upload?" + params.toString(), part));
    $("records-path").value = "";
    banner("");
    schedulePreview(0);
  } catch (err) {
    banner(err.message);
  }
}

// ---- downloads --------------------------------------------------------------------------

async function download(format) {
  try {
    const response = await api("/api/download", { plan: $("plan").value, mode: state.mode, format });
    const disposition = response.headers.get("Content-Disposition") || "";
    const name = (disposition.match(/filename="([^"]+)"/) || [])[1] || "download";
    const url = URL.createObjectURL(await response.blob());
    const link = el("a", { href: url, download: name });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    status(`downloaded ${name}`, true);
  } catch (err) {
    banner(err.message);
  }
}

// ---- setting up -------------------------------------------------------------------------

function applyState(s) {
  renderTree(s.schema);
  renderRecords(s.records);
  state.limits = s.limits;
  state.recordsFrom = s.records_from;
  renderInputFields(s.input);
  if (s.records_from === "file") $("records-path").value = s.records.source;
  if (s.schema_source) {
    $("schema-kind").value = s.schema_source.kind;
    $("schema-value").value = s.schema_source.value;
    $("schema-message").value = s.schema_source.message;
    $("schema-imports").value = s.schema_source.import_paths.join(", ");
  }
}

async function submit(event, path, body) {
  event.preventDefault();
  try {
    applyState(await api(path, body));
    banner("");
    schedulePreview(0);
  } catch (err) {
    banner(err.message);
  }
}

async function start() {
  let s;
  try {
    s = await api("/api/state");
  } catch (err) {
    banner(err.message);
    return;
  }
  state.planName = s.plan_name;
  $("plan").value = s.plan;
  setMode(s.mode);
  applyState(s);
  $("plan").addEventListener("input", () => { renderGutter([]); schedulePreview(); });
  $("plan").addEventListener("scroll", () => { $("gutter").scrollTop = $("plan").scrollTop; });
  for (const id of ["mode-yaml", "mode-lines"]) {
    $(id).addEventListener("change", (e) => changeMode(e.target.value));
  }
  $("record-index").addEventListener("input", () => schedulePreview());
  $("download-yaml").addEventListener("click", () => download("yaml"));
  $("download-parquet").addEventListener("click", () => download("parquet"));
  $("download-csv").addEventListener("click", () => download("csv"));
  $("schema-form").addEventListener("submit", (e) => submit(e, "/api/schema", {
    kind: $("schema-kind").value, value: $("schema-value").value,
    message: $("schema-message").value, import_paths: $("schema-imports").value,
  }));
  $("records-form").addEventListener("submit", (e) => {
    const chosen = $("records-upload").files[0];
    if (chosen && !$("records-path").value.trim()) {
      e.preventDefault();
      upload(chosen);
      return;
    }
    submit(e, "/api/records", { kind: "file", path: $("records-path").value, ...inputValues() });
  });
  $("records-upload").addEventListener("change", (e) => {
    if (e.target.files[0]) upload(e.target.files[0]);
  });
  $("paste-form").addEventListener("submit", (e) => submit(e, "/api/records", {
    kind: "paste", text: $("paste").value, ...inputValues(),
  }));
  renderGutter([]);
  schedulePreview(0);
}

start();
