// The satsuma console's one script: the run page's events as they happen, read from
// satsuma's API (GET /v1/runs/{id}/events, server-sent events). Without it the page
// still shows the events so far. Every text is set with textContent: never as markup.
"use strict";

function summary(type, data) {
  if (type === "TextDelta") return String(data.text || "");
  if (type === "ToolCallStart" || type === "ApprovalRequested") {
    return String(data.tool_name || "") + " " + JSON.stringify(data.input);
  }
  if (type === "ToolCallEnd") {
    const outcome = data.outcome || {};
    let text = outcome.content;
    if (Array.isArray(text)) text = text.map((part) => part.text || "").join("\n");
    return String(data.tool_name || "") + " " + (outcome.error_kind || "ok") + ": " + String(text);
  }
  if (type === "RunEnd") return String((data.result || {}).status || "");
  return "";
}

function follow(list) {
  const source = new EventSource(list.dataset.live);
  const status = document.getElementById("status");
  const seen = new Set(Array.from(list.children, (item) => item.dataset.id));
  const show = (message) => {
    if (seen.has(message.lastEventId)) return;
    seen.add(message.lastEventId);
    const data = JSON.parse(message.data);
    const item = document.createElement("li");
    item.dataset.id = message.lastEventId;
    const type = document.createElement("span");
    type.className = "event-type";
    type.textContent = message.type;
    const text = document.createElement("span");
    text.className = "event-text";
    text.textContent = summary(message.type, data);
    item.append(type, " ", text);
    list.append(item);
    if (message.type === "RunEnd") {
      // The stream ends with the run (or its pause): not reopened.
      source.close();
      if (status) status.textContent = summary("RunEnd", data) || "ended";
    }
  };
  for (const type of list.dataset.types.split(" ")) source.addEventListener(type, show);
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) list.dataset.state = "closed";
  };
}

document.addEventListener("DOMContentLoaded", () => {
  const list = document.getElementById("events");
  if (list && list.dataset.live) follow(list);
});
