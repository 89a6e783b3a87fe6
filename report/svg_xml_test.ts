import assert from "node:assert/strict";
import { assertWellFormedXml, escapeXml, svgTexts, unescapeXml } from "./svg_xml.ts";

Deno.test("escapeXml / unescapeXml round trip", () => {
  const s = `a & b < c > d "e" 'f' β`;
  assert.equal(escapeXml(s), "a &amp; b &lt; c &gt; d &quot;e&quot; &apos;f&apos; β");
  assert.equal(unescapeXml(escapeXml(s)), s);
  assert.equal(unescapeXml("&#946;&#x3b2;"), "ββ");
});

Deno.test("assertWellFormedXml accepts good documents", () => {
  assertWellFormedXml(
    '<?xml version="1.0"?><svg a="1" b=\'2\'><g><text>x &amp; y</text></g><rect/></svg>',
  );
  assertWellFormedXml("<!-- c --><svg>\n  <path d='M0,0'/>\n</svg>\n");
});

Deno.test("assertWellFormedXml rejects broken documents", () => {
  for (
    const bad of [
      "<svg><g></svg>",
      "<svg><text>a < b</text></svg>",
      "<svg><text>a & b</text></svg>",
      '<svg a="1" a="2"/>',
      "<svg a=1/>",
      "<svg/><svg/>",
      "text<svg/>",
      "<svg>",
      '<svg a="<"/>',
    ]
  ) {
    assert.throws(() => assertWellFormedXml(bad), /well-formed/, bad);
  }
});

Deno.test("svgTexts extracts and unescapes labels", () => {
  assert.deepEqual(svgTexts('<svg><text x="1">a &lt;b&gt;</text><title>t</title></svg>'), [
    "a <b>",
    "t",
  ]);
});

Deno.test("svgTexts splits multi-line text into its tspans", () => {
  const svg =
    '<svg><text x="0"><tspan>a &amp; b</tspan><tspan x="0" dy="13">c</tspan></text></svg>';
  assert.deepEqual(svgTexts(svg), ["a & b", "c"]);
});
