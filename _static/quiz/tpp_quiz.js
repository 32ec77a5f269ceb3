/* Check-yourself questions in the page (markup from _ext/tpp_quiz.py, questions from tpp.site.quiz).
 * No kernel, no network, no library: a click (or Enter/Space on the focused button) on an
 * option reveals that option's explanation; the first answer to each question counts towards
 * the running score in .tpp-score. */
(function () {
  "use strict";
  function setup(quiz) {
    var right = quiz.querySelector(".tpp-score-right");
    var answered = quiz.querySelector(".tpp-score-answered");
    var score = {right: 0, answered: 0};
    quiz.querySelectorAll(".tpp-question").forEach(function (q) {
      q.querySelectorAll(".tpp-choice").forEach(function (btn) {
        btn.addEventListener("click", function () {
          var first = !q.classList.contains("tpp-answered");
          var correct = btn.getAttribute("data-correct") === "true";
          if (first) {
            q.classList.add("tpp-answered");
            score.answered += 1;
            if (correct) { score.right += 1; q.classList.add("tpp-first-right"); }
            if (right) { right.textContent = String(score.right); }
            if (answered) { answered.textContent = String(score.answered); }
          }
          btn.classList.add(correct ? "tpp-right" : "tpp-wrong");
          btn.setAttribute("aria-expanded", "true");
          var ex = document.getElementById(btn.getAttribute("aria-controls"));
          if (ex) { ex.hidden = false; }
        });
      });
    });
  }
  function init() { document.querySelectorAll(".tpp-quiz").forEach(setup); }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
