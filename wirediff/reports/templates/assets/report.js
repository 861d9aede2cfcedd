(function () {
  "use strict";
  var bar = document.getElementById("filters");
  var active = { backend: "", kind: "", endpoint: "" };
  var dims = ["backend", "kind", "endpoint"];

  function shown(el) {
    for (var i = 0; i < dims.length; i++) {
      var want = active[dims[i]];
      var have = el.getAttribute("data-" + dims[i]);
      var values = dims[i] === "kind" && have !== null ? have.split(" ") : [have];
      if (want && have !== null && values.indexOf(want) < 0) {
        return false;
      }
    }
    return true;
  }

  function apply() {
    var main = document.querySelector("main");
    main.querySelectorAll("[data-backend], [data-kind], [data-endpoint]").forEach(function (el) {
      el.classList.toggle("f-off", !shown(el));
    });
    main.querySelectorAll(".f-group").forEach(function (group) {
      var items = group.querySelectorAll(".f-item");
      var visible = Array.prototype.some.call(items, function (item) {
        return !item.classList.contains("f-off");
      });
      group.classList.toggle("f-empty", items.length > 0 && !visible);
    });
    bar.querySelectorAll("button[data-value]").forEach(function (button) {
      var dim = button.parentNode.getAttribute("data-dim");
      button.setAttribute("aria-pressed", String(active[dim] === button.getAttribute("data-value")));
    });
  }

  function setAll(open) {
    document.querySelectorAll("main details").forEach(function (d) { d.open = open; });
  }

  function reveal() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id ? document.getElementById(id) : null;
    for (; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") { el.open = true; }
    }
  }

  if (bar) {
    bar.hidden = false;
    bar.addEventListener("click", function (event) {
      var button = event.target.closest("button");
      if (!button) { return; }
      if (button.id === "expand-all" || button.id === "collapse-all") {
        setAll(button.id === "expand-all");
        return;
      }
      var dim = button.parentNode.getAttribute("data-dim");
      var value = button.getAttribute("data-value");
      active[dim] = active[dim] === value ? "" : value;
      apply();
    });
  }
  window.addEventListener("hashchange", reveal);
  reveal();
})();
