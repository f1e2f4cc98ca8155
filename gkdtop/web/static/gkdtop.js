// textual.js opens `new WebSocket(url)`; browsers before 2024 refuse a relative URL there, so the
// page's relative "ws" is made absolute against the page's own address (tunnels and proxies keep working).
document.addEventListener("DOMContentLoaded", () => {
  const terminal = document.getElementById("terminal");
  const url = new URL(terminal.dataset.sessionWebsocketUrl, window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.search = "";
  terminal.dataset.sessionWebsocketUrl = url.href;
});
