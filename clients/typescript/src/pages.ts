// Paging on to the end of a list, for the route families' all() methods.

/** MaxPage is the largest page every list route serves (limit 1 to 1000). */
export const MaxPage = 1000;

/**
 * pages yields the items of the pages read returns, read first after
 * `after` and then after each page's next, until a page holds no items:
 * a page the server cut at 4 MiB of JSON is not the end. A page whose
 * next is not past the after it was read with (a server that does not
 * page on, which would be read for ever) throws before any of its items
 * is yielded. Leaving the loop (break, return, a throw in its body) sends
 * no further request.
 */
export async function* pages<T>(
  after: string | number | undefined,
  read: (after: string | number | undefined) => Promise<{ items: T[]; next: string }>,
): AsyncGenerator<T, void, undefined> {
  for (;;) {
    const page = await read(after);
    if (page.items.length === 0) return;
    if (after !== undefined && BigInt(page.next) <= BigInt(after)) {
      throw new Error(`racefree: a page read after ${after} ends at ${page.next}: the server does not page on`);
    }
    yield* page.items;
    after = page.next;
  }
}
