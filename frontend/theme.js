// The app's light/dark switch: the choice is kept in localStorage; without one the system's wins.

export function installThemeButton(button, root = document.documentElement) {
  const saved = localStorage.getItem("gradstep-theme");
  if (saved) root.dataset.theme = saved;
  const current = () => root.dataset.theme || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
  const sync = () => {
    const t = current();
    button.textContent = t === "dark" ? "☀ Light" : "☾ Dark";
    button.setAttribute("aria-label", `Switch to ${t === "dark" ? "light" : "dark"} theme`);
  };
  button.addEventListener("click", () => {
    root.dataset.theme = current() === "dark" ? "light" : "dark";
    localStorage.setItem("gradstep-theme", root.dataset.theme);
    sync();
  });
  sync();
}
