// The drafters panel: the lead's live feed (/v1/duo/events) as the connected backs, their
// comings and goings, the lead's state and the last response; marked stale when the feed
// drops, until it is back.
"use strict";

(function (root) {
  const { $, load, save, fmt, setStatus, sseEvents } = root.duoUtil;
  const { label } = root.duoSources;
  const sourceClasses = root.duoSources.classes;
  const LAST = "duo.last";

  // -- the drafters panel: the lead's live feed ----------------------------------------------

  function ago(seconds) {
    if (!Number.isFinite(seconds)) return "–";
    if (seconds < 1) return "now";
    if (seconds < 90) return `${seconds.toFixed(0)} s ago`;
    return `${(seconds / 60).toFixed(0)} min ago`;
  }

  function drawLead(s) {
    $("model").textContent = s.model || $("model").textContent;
    setStatus(s.busy ? (s.queued ? `busy, ${s.queued} queued` : "busy") : "idle", s.busy ? "busy" : "ok");
    $("lead-state").textContent =
      `${s.busy ? "generating" : "idle"} · queued ${s.queued} · requests ${s.requests} · local drafter ${s.local_drafter ? "yes" : "no"}`;
    const tbody = $("backs").querySelector("tbody");
    tbody.replaceChildren();
    for (const b of s.backs) {
      const tr = document.createElement("tr");
      tr.dataset.back = b.name;
      tr.dataset.id = String(b.id);
      const cells = [
        ["who", b.name],
        ["host", b.host],
        ["acceptance", b.drafted ? `${fmt(100 * b.acceptance_rate, 0)}% (${b.accepted}/${b.drafted})` : "–"],
        ["rate", fmt(b.drafts_per_second, 1)],
        ["state", b.state],
        ["seen", ago(s.time - b.last_seen)],
      ];
      for (const [cls, text] of cells) {
        const td = document.createElement("td");
        td.className = cls;
        td.textContent = text;
        tr.appendChild(td);
      }
      tr.querySelector("td.state").title = b.why;
      const swatch = document.createElement("span");
      swatch.className = "swatch " + sourceClasses(b.source);
      tr.firstChild.prepend(swatch);
      const model = document.createElement("span");
      model.className = "model";
      model.textContent = b.model || "model not told";
      tr.firstChild.appendChild(model);
      tbody.appendChild(tr);
    }
    $("no-backs").hidden = s.backs.length > 0;
    $("backs").hidden = s.backs.length === 0;
    $("drafters").classList.remove("stale");
  }

  // The feed dropped: what the panel shows is from before, and says so.
  function markStale() {
    const panel = $("drafters");
    if (panel.classList.contains("stale")) return;
    panel.classList.add("stale");
    $("lead-state").textContent = "lead unreachable: the figures below are from before it went away";
    for (const td of document.querySelectorAll("#backs td.seen")) td.textContent = "–";
  }

  const VERBS = { join: "joined", leave: "left", present: "connected" };

  function logEvent(kind, back) {
    const li = document.createElement("li");
    li.className = kind;
    li.dataset.back = back.name;
    const when = new Date().toLocaleTimeString();
    li.textContent = `${when} ${back.name} ${VERBS[kind]} (${back.host}${back.model ? ", " + back.model : ""})`;
    const log = $("feed-log");
    log.prepend(li);
    while (log.children.length > 30) log.lastChild.remove();
  }

  function drawLastResponse(t) {
    const sources = Object.entries(t.draft_sources || {})
      .map(([name, x]) => `${label(name)} ${x.draft_n_accepted}/${x.draft_n}`)
      .join(", ");
    const text =
      `${t.predicted_n} tokens at ${fmt(t.predicted_per_second, 1)} tok/s, acceptance ${fmt(100 * t.acceptance_rate, 0)}%` +
      (sources ? ` (${sources})` : "");
    $("last-response").textContent = text;
    save(LAST, { text, at: new Date().toLocaleTimeString() });
  }

  // Follow the feed for as long as the page is open; `headers()` carries the key.
  async function follow(headers) {
    let delay = 500;
    for (;;) {
      try {
        const response = await fetch("/v1/duo/events", { headers: headers() });
        if (response.status === 401) {
          setStatus("needs a key", "bad");
          await new Promise((r) => setTimeout(r, 2000));
          continue;
        }
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        delay = 500;
        let first = true;
        for await (const ev of sseEvents(response)) {
          const data = JSON.parse(ev.data);
          if (ev.kind === "state" && first) for (const b of data.backs) logEvent("present", b);
          if (ev.kind === "state") first = false;
          if (ev.kind === "state") drawLead(data);
          else if (ev.kind === "join" || ev.kind === "leave") logEvent(ev.kind, data.back);
          else if (ev.kind === "response") drawLastResponse(data.timings);
        }
      } catch (e) {
        /* the lead went away: try again */
      }
      setStatus("lead unreachable", "bad");
      markStale();
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 8000);
    }
  }

  // The last response as the page saw it before a reload.
  function restoreLast() {
    const last = load(LAST, null);
    if (last && last.text) $("last-response").textContent = `${last.text} (at ${last.at}, before this page loaded)`;
  }

  root.duoPanel = { follow, restoreLast };
})(window);
