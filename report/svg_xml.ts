/**
 * Small XML utilities for the SVG plotting layer: escaping text, a well-formedness check (used by
 * the tests of every plot) and extraction of the text labels of an SVG.
 * @module
 */

const _ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&apos;",
};

/** Escapes text for XML character data and attribute values (& < > " '). */
export function escapeXml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => _ESCAPES[c]);
}

/** Decodes the five named entities and numeric character references. */
export function unescapeXml(s: string): string {
  return s.replace(/&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);/g, (_, e: string) => {
    if (e[0] !== "#") return { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" }[e]!;
    const code = e[1] === "x" ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10);
    return String.fromCodePoint(code);
  });
}

const _NAME = /^[A-Za-z_:][\w:.-]*/;
const _ENTITY = /^&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);/;

/**
 * Throws an Error naming the first problem unless `xml` is well-formed: one root element, tags
 * properly nested and closed, attribute values quoted and unique per element, no raw `<` in text
 * or attributes, only the five named entities or numeric references. Comments, the XML
 * declaration and processing instructions are skipped; DTDs and CDATA are not supported.
 */
export function assertWellFormedXml(xml: string): void {
  const stack: string[] = [];
  let roots = 0;
  let i = 0;
  const fail = (msg: string): never => {
    throw new Error(`not well-formed XML at offset ${i}: ${msg}`);
  };
  const checkText = (text: string, at: number) => {
    for (let k = text.indexOf("&"); k >= 0; k = text.indexOf("&", k + 1)) {
      if (!_ENTITY.test(text.slice(k))) {
        i = at + k;
        fail("bad entity or raw &");
      }
    }
  };
  while (i < xml.length) {
    const lt = xml.indexOf("<", i);
    const text = lt < 0 ? xml.slice(i) : xml.slice(i, lt);
    checkText(text, i);
    if (stack.length === 0 && text.trim() !== "") fail("text outside the root element");
    if (lt < 0) break;
    i = lt;
    if (xml.startsWith("<!--", i)) {
      const end = xml.indexOf("-->", i + 4);
      if (end < 0) fail("unterminated comment");
      i = end + 3;
      continue;
    }
    if (xml.startsWith("<?", i)) {
      const end = xml.indexOf("?>", i + 2);
      if (end < 0) fail("unterminated processing instruction");
      i = end + 2;
      continue;
    }
    if (xml.startsWith("<!", i)) fail("DTD/CDATA not supported");
    if (xml.startsWith("</", i)) {
      const m = _NAME.exec(xml.slice(i + 2));
      if (!m) fail("bad closing tag");
      const name = m![0];
      let j = i + 2 + name.length;
      while (/\s/.test(xml[j] ?? "")) j++;
      if (xml[j] !== ">") fail(`closing tag </${name} not terminated`);
      const open = stack.pop();
      if (open !== name) fail(`</${name}> closes <${open ?? "nothing"}>`);
      i = j + 1;
      continue;
    }
    const m = _NAME.exec(xml.slice(i + 1));
    if (!m) fail("bad tag name");
    const name = m![0];
    let j = i + 1 + name.length;
    const seen = new Set<string>();
    for (;;) {
      const ws = j;
      while (/\s/.test(xml[j] ?? "")) j++;
      if (xml.startsWith("/>", j) || xml[j] === ">") break;
      if (j === ws) fail(`missing space before attribute in <${name}>`);
      const a = _NAME.exec(xml.slice(j));
      if (!a) fail(`bad attribute in <${name}>`);
      const attr = a![0];
      if (seen.has(attr)) fail(`duplicate attribute ${attr} in <${name}>`);
      seen.add(attr);
      j += attr.length;
      while (/\s/.test(xml[j] ?? "")) j++;
      if (xml[j] !== "=") fail(`attribute ${attr} without value in <${name}>`);
      j++;
      while (/\s/.test(xml[j] ?? "")) j++;
      const q = xml[j];
      if (q !== '"' && q !== "'") fail(`unquoted attribute ${attr} in <${name}>`);
      const end = xml.indexOf(q, j + 1);
      if (end < 0) fail(`unterminated attribute ${attr} in <${name}>`);
      const value = xml.slice(j + 1, end);
      if (value.includes("<")) fail(`raw < in attribute ${attr}`);
      checkText(value, j + 1);
      j = end + 1;
    }
    if (stack.length === 0) roots++;
    if (roots > 1) fail("more than one root element");
    if (xml[j] === "/") {
      i = j + 2;
    } else {
      stack.push(name);
      i = j + 1;
    }
  }
  if (stack.length > 0) throw new Error(`not well-formed XML: <${stack.at(-1)}> is never closed`);
  if (roots !== 1) throw new Error("not well-formed XML: no root element");
}

/**
 * The unescaped contents of every `<text>` and `<title>` element of an SVG, in document order; a
 * multi-line text gives one entry per `<tspan>` line.
 */
export function svgTexts(svg: string): string[] {
  const out: string[] = [];
  for (const m of svg.matchAll(/<(text|title)\b[^>]*>([\s\S]*?)<\/\1>/g)) {
    const inner = m[2];
    if (!inner.includes("<tspan")) {
      out.push(unescapeXml(inner));
      continue;
    }
    for (const t of inner.matchAll(/<tspan\b[^>]*>([^<]*)<\/tspan>/g)) out.push(unescapeXml(t[1]));
  }
  return out;
}
