// For the delivery bench (delivery.html and its worker): a HashPool whose `startMs` says how
// long its workers took to be ready from the moment the download asked for them, without
// starting them any earlier than the download does.
export function timed(pool) {
  const ready = pool.ready.bind(pool);
  pool.ready = () => {
    const asked = performance.now();
    return ready().then((ok) => { pool.startMs ??= performance.now() - asked; return ok; });
  };
  return pool;
}
