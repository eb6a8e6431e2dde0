// Generates src/schema.ts, the types of racefree's HTTP API, from
// openapi.json (the copy of the document serve answers at GET
// /openapi.json, which `racefree openapi` prints). `npm run generate`
// refreshes both; the tests check that src/schema.ts is what this script
// makes of openapi.json, and a Go test that openapi.json is the server's.
//
//   node scripts/generate.mjs [SPEC] [OUT]   (defaults: openapi.json src/schema.ts)
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { resolve } from "node:path";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

/** render returns the TypeScript source of the types of the spec file. */
export async function render(specPath) {
  const spec = JSON.parse(await readFile(specPath, "utf8"));
  const ast = await openapiTS(spec, { alphabetize: true });
  return COMMENT_HEADER + astToString(ast);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const spec = resolve(process.argv[2] ?? resolve(root, "openapi.json"));
  const out = resolve(process.argv[3] ?? resolve(root, "src/schema.ts"));
  await writeFile(out, await render(spec));
  console.log(`generated ${out} from ${spec}`);
}
