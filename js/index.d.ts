// Types of the npm package `tritium`.

export type ErrorCode =
  | 'WebGPUNotAvailable' | 'DeviceLost' | 'ContextLengthExceeded' | 'IntegrityError'
  | 'QuotaExceeded' | 'AbortError' | 'UnsupportedModel' | 'NetworkError' | 'Busy'
  | 'InvalidArgument' | 'NotFound' | 'StorageError';

export declare const ErrorCodes: readonly ErrorCode[];

export declare class TritiumError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>);
  [extra: string]: unknown;
}
export declare class WebGPUNotAvailableError extends TritiumError {}
export declare class DeviceLostError extends TritiumError {}
export declare class ContextLengthExceededError extends TritiumError {}
export declare class IntegrityError extends TritiumError {}
export declare class QuotaExceededError extends TritiumError {}
export declare class AbortError extends TritiumError {}
export declare class UnsupportedModelError extends TritiumError {}
export declare class NetworkError extends TritiumError {}
export declare class BusyError extends TritiumError {}
export declare class InvalidArgumentError extends TritiumError {}
export declare class NotFoundError extends TritiumError {}
export declare class StorageError extends TritiumError {}
export declare function makeError(code: string, message: string, details?: Record<string, unknown>): TritiumError;
export declare function toTritiumError(e: unknown): TritiumError;
export declare function serializeError(e: unknown): Record<string, unknown>;

export interface ProgressEvent {
  phase: 'resolve' | 'download' | 'verify' | 'parse' | 'upload' | 'warmup' | 'ready';
  loaded: number;
  total: number;
  fraction: number;
  bytesPerSecond: number;
  etaSeconds: number | null;
  shard: number;
  shards: number;
  message: string;
}

export interface DownloadOptions {
  /** The id to store the model under (default: from the URL). */
  name?: string;
  /**
   * Expected SHA-256 (64 hex digits) of a single GGUF file: checked as a download streams,
   * and by BitNet.load for a File/Blob/ArrayBuffer or a cached GGUF (IntegrityError on a
   * mismatch). An RDRR model gets InvalidArgument: its manifest hashes every shard.
   */
  integrity?: string;
  signal?: AbortSignal;
  onProgress?: (e: ProgressEvent) => void;
  /**
   * concurrency: files fetched at once (default: the cores less one, from 4 to 8). retries:
   * failed attempts in a row before giving up. hashWorkers: workers that fetch, store and hash
   * the shards (0: all in the download's own thread); default one per file fetched at once, at
   * most the cores less one.
   */
  download?: { concurrency?: number; retries?: number; hashWorkers?: number };
  kind?: 'rdrr' | 'gguf';
}

/** A WebGPU `GPUDevice` (typed loosely, so that @webgpu/types is not required). */
export type GPUDeviceLike = { readonly queue: unknown; createBuffer(descriptor: any): unknown; destroy(): void };

export interface LoadOptions extends DownloadOptions {
  /**
   * Run on this GPUDevice of the page's instead of a device of the model's own (main
   * thread only: a GPUDevice cannot be sent to a worker). dispose() then destroys every
   * buffer the model made and leaves the device working. A device made with the adapter's
   * limits (requiredLimits) runs larger tensors in fewer pieces.
   */
  device?: GPUDeviceLike;
  /** KV cache positions (default: the model's trained context, at most 4096). */
  contextLength?: number;
  /**
   * A tokenizer.json (Hugging Face tokenizers format) to use instead of the model's own
   * (GGUF and RDRR models carry one); NetworkError when it cannot be fetched,
   * UnsupportedModel when it does not parse or has more tokens than the model.
   */
  tokenizerUrl?: string | URL;
  /** Read an OPFS model through File slices even in a worker (tests). */
  readThroughBlobs?: boolean;
  /** One pass after loading so the first request does not compile kernels (default true). */
  warmup?: boolean;
  /**
   * f32 arithmetic everywhere (default false): no int8 activations, no f16 operands, an
   * f32 KV cache. The model then gives the tokens the native CPU backend gives for the same
   * input and seed; slower on GPUs.
   */
  exact?: boolean;
}

export interface ChatMessage { role: 'system' | 'user' | 'assistant' | string; content: string }
export type Input = string | ChatMessage[] | { ids: number[] };

export interface GenerateOptions {
  maxTokens?: number;
  /** 0 = greedy. Default 0.8. */
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repeatPenalty?: number;
  repeatLastN?: number;
  /** OpenAI's: subtracted from a generated token's score per time it was generated (default 0). */
  frequencyPenalty?: number;
  /** OpenAI's: subtracted from the score of every token generated so far (default 0). */
  presencePenalty?: number;
  seed?: number;
  stop?: string | string[];
  ignoreEos?: boolean;
  /** Render chat messages without the assistant prefix (continue the last message). */
  continueFinalMessage?: boolean;
  /** LoRA adapters (handles from loadAdapter) applied to this generation; none: the model alone. */
  adapters?: (AdapterHandle | { adapter: AdapterHandle; scale?: number })[];
  signal?: AbortSignal;
  onToken?: (e: TokenEvent) => void;
}

/** A LoRA adapter loaded for a model (loadAdapter). */
export interface AdapterHandle { readonly id: number; readonly name: string }
export interface AdapterOptions { name?: string; integrity?: string; signal?: AbortSignal; onProgress?: (e: unknown) => void }

export interface Usage { promptTokens: number; completionTokens: number; cachedTokens: number; totalTokens: number }
export interface Timings {
  ttftMs: number; prefillMs: number; decodeMs: number; totalMs: number;
  prefillTokensPerSecond: number; decodeTokensPerSecond: number;
}
export interface TokenEvent { type: 'token'; text: string; tokenId: number | null }
export interface DoneEvent {
  type: 'done';
  finishReason: 'stop' | 'length' | 'abort';
  text: string;
  tokenIds: number[];
  usage: Usage;
  timings: Timings;
}
export type StreamEvent = TokenEvent | DoneEvent;

export interface ModelInfo {
  name: string; architecture: string; nVocab: number; nLayers: number; dim: number;
  nHeads: number; nKvHeads: number; trainedContextLength: number; contextLength: number;
  fileBytes: number; gpuBytes: number; chatTemplate: string; bosTokenId: number | null;
  eosTokenId: number | null; stopTokenIds: number[]; loadPath: 'sync-access-handle' | 'blob';
}
export interface DeviceInfo { adapter: string; backend: string; deviceType: string; driver: string; shaderF16: boolean }
export interface Stats {
  generations: number; promptTokens: number; cachedTokens: number; completionTokens: number;
  kvTokens: number; loadMs: number; last: Timings | null; busy?: boolean; disposed?: boolean;
}
export interface StageStats { stage: string; count: number; min: number; max: number; mean: number; rms: number; nan: number; inf: number }
/** What became of one of the model's runtime hints (`runtimeOptimizations`). */
export interface HintNote { hint: string; outcome: 'applied' | 'default' | 'ignored'; detail: string }
export interface Diagnosis {
  tokens: number; stages: StageStats[]; nonFiniteStages: string[];
  /** The model's runtime hints and what became of each. */
  hints: HintNote[];
  /** The pass as the GPU runs it; products, norms and attention name their kernel (`=> kernel`). */
  plan: string[];
  ms: number;
}

export interface ChatCompletionRequest {
  messages: { role: string; content: string | { type: string; text?: string }[] }[];
  model?: string;
  max_tokens?: number;
  max_completion_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  repetition_penalty?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  seed?: number;
  stop?: string | string[];
  n?: 1;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  ignore_eos?: boolean;
  signal?: AbortSignal;
}
export interface ChatCompletionUsage {
  prompt_tokens: number; completion_tokens: number; total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  extra?: { timings: Timings };
}
export interface ChatCompletion {
  id: string; object: 'chat.completion'; created: number; model: string;
  choices: { index: number; message: { role: 'assistant'; content: string }; finish_reason: 'stop' | 'length' | 'abort'; logprobs: null }[];
  usage: ChatCompletionUsage;
}
export interface ChatCompletionChunk {
  id: string; object: 'chat.completion.chunk'; created: number; model: string;
  choices: { index: number; delta: { role?: 'assistant'; content?: string }; finish_reason: 'stop' | 'length' | 'abort' | null; logprobs: null }[];
  usage?: ChatCompletionUsage;
}
export interface Chat {
  completions: {
    create(req: ChatCompletionRequest & { stream: true }): Promise<AsyncIterable<ChatCompletionChunk>>;
    create(req: ChatCompletionRequest & { stream?: false }): Promise<ChatCompletion>;
  };
}

/** What BitNet and the worker proxy have in common (the worker's methods are all async). */
interface ModelApi {
  readonly chat: Chat;
  modelInfo: ModelInfo;
  deviceInfo: DeviceInfo;
  generate(input: Input, opts?: GenerateOptions): AsyncGenerator<string, void>;
  stream(input: Input, opts?: GenerateOptions): AsyncGenerator<StreamEvent, void>;
  complete(input: Input, opts?: GenerateOptions): Promise<{ text: string; finishReason: DoneEvent['finishReason']; usage: Usage; timings: Timings }>;
}

export declare class BitNet implements ModelApi {
  private constructor();
  static load(source: string | URL | Blob | ArrayBuffer | ArrayBufferView, opts?: LoadOptions): Promise<BitNet>;
  readonly chat: Chat;
  modelInfo: ModelInfo;
  deviceInfo: DeviceInfo;
  generate(input: Input, opts?: GenerateOptions): AsyncGenerator<string, void>;
  stream(input: Input, opts?: GenerateOptions): AsyncGenerator<StreamEvent, void>;
  complete(input: Input, opts?: GenerateOptions): Promise<{ text: string; finishReason: DoneEvent['finishReason']; usage: Usage; timings: Timings }>;
  /** A LoRA adapter (URL, cached id, or GGUF adapter bytes) for this model. */
  loadAdapter(source: string | URL | Blob | ArrayBuffer | ArrayBufferView, opts?: AdapterOptions): Promise<AdapterHandle>;
  diagnose(text?: string): Promise<Diagnosis>;
  stats(): Stats;
  tokenize(text: string, opts?: { addSpecial?: boolean }): number[];
  detokenize(ids: ArrayLike<number>, opts?: { skipSpecial?: boolean }): string;
  streamPieces(ids: ArrayLike<number>): string[];
  applyChatTemplate(messages: ChatMessage[], opts?: { addGenerationPrompt?: boolean }): string;
  resetChat(): void;
  dispose(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface WorkerBitNet extends ModelApi {
  loadAdapter(source: string | URL | Blob | ArrayBuffer | ArrayBufferView, opts?: AdapterOptions): Promise<AdapterHandle>;
  diagnose(text?: string): Promise<Diagnosis>;
  stats(): Promise<Stats>;
  tokenize(text: string, opts?: { addSpecial?: boolean }): Promise<number[]>;
  detokenize(ids: ArrayLike<number>, opts?: { skipSpecial?: boolean }): Promise<string>;
  streamPieces(ids: ArrayLike<number>): Promise<string[]>;
  applyChatTemplate(messages: ChatMessage[], opts?: { addGenerationPrompt?: boolean }): Promise<string>;
  resetChat(): Promise<void>;
  /** Load a model into this worker again: after dispose(), or in place of the current one. */
  load(source: string | URL | Blob | ArrayBuffer, opts?: LoadOptions): Promise<WorkerBitNet>;
  dispose(): Promise<boolean>;
  terminate(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

export declare function createWorkerBitNet(worker: Worker, source: string | URL | Blob | ArrayBuffer, opts?: LoadOptions): Promise<WorkerBitNet>;
export declare function initWasm(wasmSource?: string | URL | Response | BufferSource | WebAssembly.Module): Promise<unknown>;
export declare function isSupported(): Promise<boolean>;
export declare function listCached(): Promise<{ id: string; name: string; kind: string; bytes: number; shards: number }[]>;
export declare function deleteCached(id: string): Promise<boolean>;
export declare function download(source: string | URL, opts?: DownloadOptions): Promise<{ id: string; name: string; bytes: number; [k: string]: unknown }>;
export declare function cacheIdFor(url: string | URL): Promise<string | null>;
