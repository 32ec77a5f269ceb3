/* The course site's script (added by _ext/tpp_book.py, loaded with `defer`).

1. Sidebar buttons. sphinx-book-theme 1.3.0 puts a second ☰ ("primary-toggle") and a second
   contents button ("secondary-toggle") into the article header, and hides pydata-sphinx-theme
   0.17.1's copies in the top bar; both themes' scripts bind their click handlers to
   `document.querySelector(...)`, the FIRST copy, i.e. the hidden one. So the buttons a reader
   sees do nothing: no drawer at phone and tablet widths, no collapsing sidebar on a laptop.
   Here every other copy forwards its click to the first copy, whose handlers then open the
   drawer (a <dialog>) or collapse the sidebar exactly as the themes intend.

2. Search snippets. Sphinx's search shows the text of each found page, in which mathematics is
   still TeX source (`\(\frac{P-1}{M}\)`): the snippet shows it as plain text instead.
*/
(function () {
  "use strict";

  function forwardSidebarToggles() {
    for (const cls of ["primary-toggle", "secondary-toggle"]) {
      const copies = Array.from(document.querySelectorAll("." + cls));
      const bound = copies[0];
      for (const button of copies.slice(1)) {
        button.addEventListener("click", (event) => {
          event.preventDefault();
          event.stopPropagation();
          bound.click();
        });
      }
    }
  }

  const GREEK = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", eta: "η",
    theta: "θ", lambda: "λ", mu: "μ", nu: "ν", pi: "π", rho: "ρ", sigma: "σ", tau: "τ",
    phi: "φ", varphi: "φ", psi: "ψ", omega: "ω", Delta: "Δ", Sigma: "Σ", Psi: "Ψ", Phi: "Φ",
    Omega: "Ω", Gamma: "Γ", Lambda: "Λ", Theta: "Θ", cdot: "·", times: "×", approx: "≈",
    le: "≤", leq: "≤", ge: "≥", geq: "≥", ne: "≠", neq: "≠", to: "→", infty: "∞", ldots: "…",
    cdots: "…", sum: "Σ", prod: "Π", partial: "∂", sqrt: "√", lceil: "⌈", rceil: "⌉",
    lfloor: "⌊", rfloor: "⌋", pm: "±", in: "∈",
  };

  /** TeX source as readable plain text: `\frac{P-1}{M}` → `(P-1)/(M)`, `\alpha` → `α`. */
  function texToText(tex) {
    let s = tex.replace(/^\s*(\\\(|\\\[|\$\$?)/, "").replace(/(\\\)|\\\]|\$\$?)\s*$/, "");
    for (let i = 0; i < 4; i++) {
      s = s.replace(/\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}/g, "($1)/($2)");
    }
    s = s.replace(/\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])/g, "")
         .replace(/\\(?:mathrm|mathbf|mathit|mathcal|operatorname|text|textrm|textbf)\s*/g, "")
         .replace(/\\begin\{[^}]*\}|\\end\{[^}]*\}/g, " ")
         .replace(/\\([A-Za-z]+)/g, (m, name) => (name in GREEK ? GREEK[name] : ""))
         .replace(/\\[,;:! ]/g, " ")
         .replace(/\\\\|&/g, " ")
         .replace(/[{}]/g, "")
         .replace(/\s+/g, " ");
    return s.trim();
  }

  function plainSearchSnippets() {
    if (typeof Search === "undefined" || !Search.htmlToText) return;   // not the search page
    const original = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(".math, mjx-container").forEach((el) => {
        el.replaceWith(doc.createTextNode(" " + texToText(el.textContent) + " "));
      });
      return original(doc.documentElement.outerHTML, anchor);
    };
  }

  /* 3. Figures on a phone. SVG figures are drawn at their size in points, 4/3 px per point (a
     12-inch figure is 1152 px wide); squeezed into a 360-px column its 10-pt labels would be
     4 px tall. A figure shown below MIN_SCALE of its drawn size keeps MIN_SCALE (8-pt tick text
     8 px tall, 10-pt labels 10 px) and its box scrolls sideways instead (tpp.css). */
  const MIN_SCALE = 0.75;

  function fitFigure(img) {
    img.classList.remove("tpp-legible");
    img.style.width = "";
    if (!img.naturalWidth || img.clientWidth === 0) return;     // not loaded, or hidden
    if (img.clientWidth < MIN_SCALE * img.naturalWidth) {
      img.classList.add("tpp-legible");
      img.style.width = Math.round(MIN_SCALE * img.naturalWidth) + "px";
    }
  }

  function legibleFigures() {
    const figures = Array.from(document.querySelectorAll("main img"))
      .filter((img) => /\.svg(\?|#|$)/i.test(img.getAttribute("src") || ""));
    for (const img of figures) {
      if (img.complete) fitFigure(img);
      else img.addEventListener("load", () => fitFigure(img));
    }
    window.addEventListener("resize", () => figures.forEach(fitFigure));
    document.addEventListener("toggle", (e) => e.target.querySelectorAll &&
      e.target.querySelectorAll("img.tpp-legible, img").forEach((img) =>
        figures.includes(img) && fitFigure(img)), true);
  }

  window.tppTexToText = texToText;   // for the site tests
  window.tppMinFigureScale = MIN_SCALE;
  legibleFigures();
  forwardSidebarToggles();
  plainSearchSnippets();
})();
