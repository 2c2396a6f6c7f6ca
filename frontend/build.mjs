// Rebuild frontend/vendor/ from the npm packages pinned in package-lock.json:
//   cd frontend && npm ci && npm run build
// vendor/ is committed, so `pip install .` users need no node.
import { build } from "esbuild";
import { readFileSync, writeFileSync } from "node:fs";

const lock = JSON.parse(readFileSync(new URL("./package-lock.json", import.meta.url)));
const bundles = ["codemirror", "d3", "dagre"];
for (const name of bundles) {
  await build({
    entryPoints: [`vendor-src/${name}.js`],
    outfile: `vendor/${name}.js`,
    bundle: true,
    minify: true,
    format: "esm",
    target: ["es2020"],
    legalComments: "eof",
    logLevel: "warning",
  });
}
// Record which versions went in, for anyone reading vendor/ without node.
const versions = Object.fromEntries(
  Object.entries(lock.packages)
    .filter(([path, p]) => path.startsWith("node_modules/") && !p.dev)
    .map(([path, p]) => [path.slice("node_modules/".length), p.version]),
);
writeFileSync("vendor/VERSIONS.json", JSON.stringify(versions, null, 2) + "\n");
console.log(`built vendor/{${bundles.join(",")}}.js from ${Object.keys(versions).length} pinned packages`);
