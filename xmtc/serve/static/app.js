// xmtc web pages: plain JavaScript, no build step. Talks to v1/ (Annif-compatible) and ui/api/.
// Every URL is relative: the page's <base href> is the server's root path (xmtc serve --root-path).
"use strict";
const xmtc = (() => {
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs = {}, ...kids) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
    }
    for (const kid of kids) node.append(kid);
    return node;
  };
  async function json(url, options) {
    const resp = await fetch(url, options);
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.detail || `${resp.status} ${resp.statusText}`);
    return body;
  }
  // A write (a save): sends the bearer token kept for this tab; a 401/403 asks for it once and retries.
  async function write(url, options) {
    const withToken = () => {
      const token = sessionStorage.getItem("xmtc-token");
      const headers = Object.assign({}, options.headers, token ? {Authorization: `Bearer ${token}`} : {});
      return fetch(url, Object.assign({}, options, {headers}));
    };
    let resp = await withToken();
    if (resp.status === 401 || resp.status === 403) {
      const token = window.prompt(resp.status === 401 ? "This server needs a token to save. Token:"
                                                      : "That token was refused. Token:");
      if (token) { sessionStorage.setItem("xmtc-token", token.trim()); resp = await withToken(); }
    }
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(body.detail || `${resp.status} ${resp.statusText}`);
    return body;
  }
  async function fillProjects(select, wanted) {
    const {projects} = await json("ui/api/projects");
    for (const p of projects) select.append(el("option", {value: p.project_id, text: `${p.project_id} (${p.method}, ${p.n_labels} labels)`}));
    if (wanted && projects.some((p) => p.project_id === wanted)) select.value = wanted;
    return Object.fromEntries(projects.map((p) => [p.project_id, p]));
  }
  function labelRow(r) {
    const pct = Math.max(0, Math.min(1, r.score)) * 100;
    const name = /^https?:/.test(r.uri) ? el("a", {href: r.uri, class: "name", title: r.uri, text: r.label})
                                         : el("span", {class: "name", title: r.uri, text: r.label});
    const bar = el("div", {class: "bar"}, el("span", {style: `width:${pct.toFixed(1)}%`}));
    return el("div", {class: "row"}, name, bar, el("span", {class: "score", text: r.score.toFixed(3)}));
  }
  function termList(terms) {
    const box = el("div", {class: "terms"}, "words: ");
    if (!terms.length) box.append("none of the input's words (the label's bias alone)");
    for (const t of terms) {
      box.append(el("span", {class: "term" + (t.weight < 0 ? " neg" : ""), title: `contribution ${t.weight.toFixed(4)}`,
                             text: `${t.term} ${t.weight >= 0 ? "+" : ""}${t.weight.toFixed(3)}`}));
    }
    return box;
  }

  function suggestPage() {
    const params = new URLSearchParams(location.search);
    let projects = {};
    async function run(ev) {
      if (ev) ev.preventDefault();
      const project = $("project").value, text = $("text").value, limit = $("limit").value || "10";
      const url = new URL(location.href);
      url.searchParams.set("text", text);
      url.searchParams.set("project", project);
      history.replaceState(null, "", url);
      $("status").textContent = "suggesting...";
      const t0 = performance.now();
      try {
        const body = new URLSearchParams({text, limit});
        const {results} = await json(`v1/projects/${encodeURIComponent(project)}/suggest`, {method: "POST", body});
        const list = $("results");
        list.replaceChildren(...results.map((r) => el("li", {"data-uri": r.uri}, labelRow(r))));
        $("status").textContent = results.length ? `${results.length} labels in ${(performance.now() - t0).toFixed(0)} ms`
                                                  : "no labels above zero for this text";
        if (projects[project] && projects[project].explain && results.length) {
          const ex = await json(`ui/api/projects/${encodeURIComponent(project)}/explain`, {
            method: "POST", headers: {"Content-Type": "application/json"},
            body: JSON.stringify({text, limit: Math.min(results.length, 100)})});
          const byUri = Object.fromEntries(ex.results.map((r) => [r.uri, r.terms]));
          for (const li of list.children) {
            const terms = byUri[li.dataset.uri];
            if (terms) li.append(termList(terms));
          }
        }
      } catch (err) {
        $("status").textContent = `error: ${err.message}`;
      }
    }
    $("suggest-form").addEventListener("submit", run);
    fillProjects($("project"), params.get("project")).then((p) => {
      projects = p;
      if (params.has("text")) { $("text").value = params.get("text"); run(); }
    }).catch((err) => { $("status").textContent = `error: ${err.message}`; });
  }

  function labelPage() {
    const params = new URLSearchParams(location.search);
    let project = null;
    async function more() {
      project = $("project").value;
      $("status").textContent = "choosing documents...";
      try {
        const data = await json(`ui/api/projects/${encodeURIComponent(project)}/next?n=5`);
        $("documents").replaceChildren(...data.documents.map(docCard));
        $("status").textContent = `${data.remaining} documents left to label; order: ${data.strategy}`;
      } catch (err) {
        $("status").textContent = `error: ${err.message}`;
      }
    }
    function docCard(doc) {
      const box = el("div", {class: "doc", "data-pool-index": doc.pool_index});
      box.append(el("p", {class: "text", text: doc.text}));
      const choices = el("div", {class: "choices"});
      for (const s of doc.suggestions) {
        const cb = el("input", {type: "checkbox", value: s.id});
        cb.checked = s.score >= 0.5;  // accepted unless the model is unsure; the expert ticks or unticks
        choices.append(el("label", {title: `${s.uri} (score ${s.score.toFixed(3)})`}, cb, ` ${s.label} `,
                          el("small", {text: s.score.toFixed(2)})));
      }
      const extra = el("input", {type: "text", list: "label-options", placeholder: "add a label (name or id)"});
      extra.addEventListener("input", () => searchLabels(extra.value));
      const add = el("button", {type: "button", class: "secondary", text: "Add"});
      add.addEventListener("click", () => {
        const id = resolveLabel(extra.value);
        if (!id) return;
        const cb = el("input", {type: "checkbox", value: id});
        cb.checked = true;
        choices.append(el("label", {}, cb, ` ${extra.value} `));
        extra.value = "";
      });
      const save = el("button", {type: "button", class: "save", text: "Save"});
      const note = el("span", {class: "note"});
      save.addEventListener("click", async () => {
        const labels = [...choices.querySelectorAll("input:checked")].map((c) => c.value);
        try {
          const res = await write(`ui/api/projects/${encodeURIComponent(project)}/labelled`, {
            method: "POST", headers: {"Content-Type": "application/json"},
            body: JSON.stringify({text: doc.text, labels, pool_index: doc.pool_index})});
          box.classList.add("saved");
          save.disabled = true;
          note.textContent = ` saved (${labels.length} labels; line ${res.saved} of ${res.file})`;
        } catch (err) {
          note.textContent = ` error: ${err.message}`;
        }
      });
      box.append(choices, el("p", {}, extra, " ", add, " ", save, note));
      return box;
    }
    const known = new Map();
    async function searchLabels(q) {
      if (q.length < 2) return;
      const {labels} = await json(`ui/api/projects/${encodeURIComponent(project)}/labels?q=${encodeURIComponent(q)}`);
      const list = $("label-options");
      list.replaceChildren(...labels.map((l) => { known.set(l.label, l.id); return el("option", {value: l.label, text: l.id}); }));
    }
    function resolveLabel(text) {
      text = text.trim();
      return text ? (known.get(text) || text) : null;
    }
    $("more").addEventListener("click", more);
    $("project").addEventListener("change", more);
    fillProjects($("project"), params.get("project")).then(more)
      .catch((err) => { $("status").textContent = `error: ${err.message}`; });
  }
  return {suggestPage, labelPage};
})();
