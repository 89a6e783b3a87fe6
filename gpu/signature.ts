/**
 * One typed signature per kernel: a pass declares its uniform parameters (name and scalar type, in
 * order) and its storage bindings (name, element type, access) once, and both sides come from that
 * declaration:
 *
 * - the shader's `struct Params { … };` (padded to 16 bytes) and its
 *   `@group(0) @binding(i) var<…> name: array<…>;` lines ({@link Signature.wgsl});
 * - the launcher's uniform words, packed by field name from a typed record (a missing or unknown
 *   field is an error), and the bind group's entries in binding order from a record of buffers by
 *   binding name (a missing or unknown name is an error) ({@link Signature.bind}).
 *
 * A kernel compiled with {@link compileKernel} is checked against its signature: its source must
 * declare exactly the signature's struct and bindings, so a shader and a launcher cannot disagree
 * on a field's place or a binding's index. The bind group goes through GpuContext.bindGroup, which
 * refuses bindings the WebGPU specification forbids to share a buffer (gpu/context.ts).
 *
 * Layout knobs (`layout`) only decide how the declarations are written (names of the struct, of
 * the uniform variable and of the padding fields, where the struct's line breaks): generated
 * shaders stay byte-identical to the hand-written ones they replaced.
 * @module
 */
import type { BindingResource, GpuContext, TrackedBuffer } from "./context.ts";
import type { Recorder } from "./recorder.ts";

/** Scalar type of a uniform field. */
export type ParamType = "u32" | "i32" | "f32";

/** Access of a storage binding. */
export type Access = "read" | "read_write";

/** One storage binding: `var<storage, access> name: array<elem[, count]>`. */
export interface BindingDecl {
  /** WGSL element type of the array (e.g. `f32`, `vec4<f32>`, `atomic<u32>`). */
  elem: string;
  access: Access;
  /** Elements of a fixed-size array (default: runtime-sized). */
  count?: number;
  /** Declared and bound only when true (default true). */
  when?: boolean;
  /**
   * Binding index (default: the lowest index no other binding has, in declaration order); the
   * lines are written in declaration order whatever the indices.
   */
  index?: number;
}

/** How the declarations are written. */
export interface SignatureLayout {
  /** Name of the uniform struct (default `Params`). */
  struct?: string;
  /** Name of the uniform variable (default `P`). */
  uniform?: string;
  /** Names of the padding fields, in order (default `_a`, `_b`, `_c`). */
  pad?: string[];
  /** Field positions (1-based, padding included) after which the struct breaks its line. */
  breaks?: number[];
}

/** A signature's declaration. */
export interface SignatureDecl<
  P extends Record<string, ParamType>,
  B extends Record<string, BindingDecl>,
> {
  /** Uniform fields in order (binding 0); none: the kernel has no uniform block. */
  params?: P;
  bindings: B;
  layout?: SignatureLayout;
}

/** The values of a signature's uniform fields, by name. */
export type ParamValues<P extends Record<string, ParamType>> = { [K in keyof P]: number };

type _Optional<B> = { [K in keyof B]: B[K] extends { when: boolean } ? K : never }[keyof B];
type _Required<B> = Exclude<keyof B, _Optional<B>>;

/**
 * The buffers of a signature's bindings, by name: conditional ones (declared with `when`) may be
 * left out, and must be exactly when their condition is false.
 */
export type BufferArgs<B extends Record<string, BindingDecl>> =
  & { [K in _Required<B>]: BindingResource }
  & { [K in _Optional<B>]?: BindingResource };

/** A packed uniform block of one signature, made by {@link Signature.uniform}. */
export interface SignatureUniform {
  readonly buffer: TrackedBuffer;
  /** The struct declaration it was packed for. */
  readonly struct: string;
}

/** A binding as declared and resolved: included, with its index. */
export interface ResolvedBinding {
  name: string;
  index: number;
  access: Access | "uniform";
  /** WGSL type of the variable. */
  type: string;
}

const DEFAULT_PAD = ["_a", "_b", "_c"];

/** See the module doc; make one with {@link signature}. */
export class Signature<
  P extends Record<string, ParamType> = Record<string, ParamType>,
  B extends Record<string, BindingDecl> = Record<string, BindingDecl>,
> {
  /** `struct Params { … };` ("" without parameters). */
  readonly struct: string;
  /** Every included binding in declaration order (the uniform first, at index 0). */
  readonly bindings: readonly ResolvedBinding[];
  readonly #fields: [string, ParamType][];
  readonly #words: number;
  readonly #decl: B;

  constructor(d: SignatureDecl<P, B>) {
    const lay = d.layout ?? {};
    this.#decl = d.bindings;
    this.#fields = Object.entries(d.params ?? {}) as [string, ParamType][];
    const n = this.#fields.length;
    this.#words = n === 0 ? 0 : Math.ceil(n / 4) * 4;
    const pad = lay.pad ?? DEFAULT_PAD;
    if (this.#words - n > pad.length) throw new RangeError("signature: too few padding names");
    const all = [...this.#fields.map(([k, t]) => `${k}: ${t}`)];
    for (let i = 0; i < this.#words - n; i++) all.push(`${pad[i]}: u32`);
    const breaks = new Set(lay.breaks ?? []);
    const body = all.map((f, i) =>
      `${f}${i === all.length - 1 ? "" : breaks.has(i + 1) ? ",\n  " : ", "}`
    )
      .join("");
    const structName = lay.struct ?? "Params";
    this.struct = n === 0 ? "" : `struct ${structName} { ${body} };`;
    const out: ResolvedBinding[] = [];
    if (n > 0) {
      out.push({ name: lay.uniform ?? "P", index: 0, access: "uniform", type: structName });
    }
    const taken = new Set<number>(out.map((b) => b.index));
    const included = Object.entries(d.bindings).filter(([, b]) => b.when !== false);
    for (const [, b] of included) {
      if (b.index !== undefined) {
        if (taken.has(b.index)) throw new RangeError(`signature: binding ${b.index} twice`);
        taken.add(b.index);
      }
    }
    let next = 0;
    for (const [name, b] of included) {
      let index = b.index;
      if (index === undefined) {
        while (taken.has(next)) next++;
        index = next;
        taken.add(index);
      }
      const type = `array<${b.elem}${b.count === undefined ? "" : `, ${b.count}`}>`;
      out.push({ name, index, access: b.access, type });
    }
    this.bindings = out;
  }

  /** The `@group(0) @binding(i) var<…> name: type;` line of one binding (or the uniform's). */
  line(name: string): string {
    const b = this.bindings.find((x) => x.name === name);
    if (!b) throw new RangeError(`signature: no binding '${name}'`);
    return _line(b);
  }

  /** Every binding line, in declaration order (the uniform's first). */
  get bindingLines(): string {
    return this.bindings.map(_line).join("\n");
  }

  /** The struct and the binding lines. */
  get wgsl(): string {
    return this.struct === "" ? this.bindingLines : `${this.struct}\n${this.bindingLines}`;
  }

  /** The uniform words of `values` (every field by name; unknown ones refused). */
  pack(values: ParamValues<P>): Uint32Array {
    const given = values as Record<string, number>;
    const words = new Uint32Array(this.#words);
    const f32 = new Float32Array(words.buffer), i32 = new Int32Array(words.buffer);
    const known = new Set(this.#fields.map(([k]) => k));
    for (const k of Object.keys(given)) {
      if (!known.has(k)) throw new RangeError(`signature: unknown parameter '${k}'`);
    }
    this.#fields.forEach(([k, t], i) => {
      const x = given[k];
      if (typeof x !== "number" || !Number.isFinite(x)) {
        throw new RangeError(`signature: parameter '${k}' missing or not a finite number`);
      }
      if (t === "f32") f32[i] = x;
      else if (t === "i32") i32[i] = x;
      else words[i] = x;
    });
    return words;
  }

  /** A uniform block of `values`, released with the recorder's next submission. */
  uniform(rec: Recorder, values: ParamValues<P>, label = "params"): SignatureUniform {
    return { buffer: rec.uniform(this.pack(values), label), struct: this.struct };
  }

  /** The resources of the storage bindings in binding order, from a record by name. */
  resources(buffers: BufferArgs<B>): BindingResource[] {
    const given = buffers as Record<string, BindingResource | undefined>;
    for (const k of Object.keys(given)) {
      const d = this.#decl[k];
      if (d === undefined) throw new RangeError(`signature: unknown binding '${k}'`);
      if (d.when === false && given[k] !== undefined) {
        throw new RangeError(`signature: binding '${k}' is not declared in this variant`);
      }
    }
    const storage = this.bindings.filter((b) => b.access !== "uniform");
    for (const b of storage) {
      if (given[b.name] === undefined) {
        throw new RangeError(`signature: binding '${b.name}' missing`);
      }
    }
    return [...storage].sort((a, b) => a.index - b.index).map((b) => given[b.name]!);
  }

  /**
   * The bind group of `pipeline` (compiled from this signature) from the uniform values (or a
   * block made by {@link uniform}) and the buffers by name.
   */
  bind(
    rec: Recorder,
    pipeline: GPUComputePipeline,
    params: ParamValues<P> | SignatureUniform | undefined,
    buffers: BufferArgs<B>,
    label?: string,
  ): GPUBindGroup {
    const res = this.resources(buffers);
    if (this.struct === "") {
      if (params !== undefined) throw new RangeError("signature: no uniform block declared");
      return rec.bindGroup(pipeline, res, label);
    }
    if (params === undefined) throw new RangeError("signature: uniform values missing");
    let u: TrackedBuffer;
    if (_isUniform(params)) {
      if (params.struct !== this.struct) {
        throw new RangeError("signature: a uniform block packed for another struct");
      }
      u = params.buffer;
    } else {
      u = rec.uniform(this.pack(params as ParamValues<P>), label ? `${label} params` : "params");
    }
    const uniform = this.bindings[0];
    return rec.bindGroup(pipeline, _withUniform(res, u, uniform.index, this.bindings), label);
  }

  /**
   * Throws unless `code` declares this signature's struct and exactly its bindings (indices,
   * access, names and types), whatever else it holds.
   */
  check(code: string, label: string): void {
    if (this.struct !== "" && !code.includes(this.struct)) {
      throw new RangeError(`${label}: the shader does not declare the signature's struct`);
    }
    const declared = declaredBindings(code).map(_line).sort().join("\n");
    const want = this.bindings.map(_line).sort().join("\n");
    if (declared !== want) {
      throw new RangeError(
        `${label}: the shader's bindings differ from its signature:\n${declared}\nagainst\n${want}`,
      );
    }
  }
}

function _isUniform(x: unknown): x is SignatureUniform {
  return typeof x === "object" && x !== null && "struct" in x && "buffer" in x;
}

/** The resources in binding order with the uniform inserted at its index. */
function _withUniform(
  res: BindingResource[],
  u: TrackedBuffer,
  uniformIndex: number,
  all: readonly ResolvedBinding[],
): BindingResource[] {
  const order = [...all].sort((a, b) => a.index - b.index);
  const out: BindingResource[] = [];
  let i = 0;
  for (const b of order) out.push(b.index === uniformIndex ? u : res[i++]);
  return out;
}

function _line(b: ResolvedBinding): string {
  const space = b.access === "uniform" ? "uniform" : `storage, ${b.access}`;
  return `@group(0) @binding(${b.index}) var<${space}> ${b.name}: ${b.type};`;
}

/** The group-0 bindings a WGSL source declares. */
export function declaredBindings(code: string): ResolvedBinding[] {
  const re =
    /@group\(0\)\s*@binding\((\d+)\)\s*var<(uniform|storage)\s*(?:,\s*(read_write|read))?\s*>\s*(\w+)\s*:\s*([^;]+);/g;
  return [...code.matchAll(re)].map((m) => ({
    name: m[4],
    index: Number(m[1]),
    access: m[2] === "uniform" ? "uniform" : (m[3] ?? "read") as Access,
    type: m[5].trim(),
  }));
}

/** The words of a space-separated list, as a union of string literals. */
type _Words<S extends string> = S extends `${infer A} ${infer B}` ? A | _Words<B> : S;

/**
 * Uniform fields of type u32 named in order in one space-separated string:
 * `{ ...u32s("rows d"), scale: "f32" }` is `{ rows: "u32", d: "u32", scale: "f32" }`.
 */
export function u32s<const S extends string>(names: S): { [N in _Words<S>]: "u32" } {
  return Object.fromEntries(names.split(" ").map((n) => [n, "u32"])) as {
    [N in _Words<S>]: "u32";
  };
}

/** Declares a signature (see the module doc). */
export function signature<
  const P extends Record<string, ParamType>,
  const B extends Record<string, BindingDecl>,
>(d: SignatureDecl<P, B>): Signature<P, B> {
  return new Signature(d);
}

/** A pipeline compiled from a source checked against its signature. */
export interface Kernel<
  P extends Record<string, ParamType> = Record<string, ParamType>,
  B extends Record<string, BindingDecl> = Record<string, BindingDecl>,
> {
  readonly pipeline: GPUComputePipeline;
  readonly sig: Signature<P, B>;
  readonly label: string;
  /** The bind group of one dispatch: uniform values (or a packed block) and buffers by name. */
  bind(
    rec: Recorder,
    params: ParamValues<P> | SignatureUniform | undefined,
    buffers: BufferArgs<B>,
  ): GPUBindGroup;
}

/** The kernel type of a signature. */
export type KernelOf<S> = S extends Signature<infer P, infer B> ? Kernel<P, B> : never;

function _kernel<P extends Record<string, ParamType>, B extends Record<string, BindingDecl>>(
  pipeline: GPUComputePipeline,
  sig: Signature<P, B>,
  label: string,
): Kernel<P, B> {
  return {
    pipeline,
    sig,
    label,
    bind: (rec, params, buffers) => sig.bind(rec, pipeline, params, buffers, label),
  };
}

/** Compiles `code`, which must declare `sig` ({@link Signature.check}). */
export async function compileKernel<
  P extends Record<string, ParamType>,
  B extends Record<string, BindingDecl>,
>(ctx: GpuContext, sig: Signature<P, B>, code: string, label: string): Promise<Kernel<P, B>> {
  sig.check(code, label);
  return _kernel(await ctx.pipeline(code, label), sig, label);
}

/** {@link compileKernel} compiled synchronously (GpuContext.pipelineNow: on first use). */
export function compileKernelNow<
  P extends Record<string, ParamType>,
  B extends Record<string, BindingDecl>,
>(ctx: GpuContext, sig: Signature<P, B>, code: string, label: string): Kernel<P, B> {
  sig.check(code, label);
  return _kernel(ctx.pipelineNow(code, label), sig, label);
}
