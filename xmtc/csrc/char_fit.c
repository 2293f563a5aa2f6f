/* The character n-gram featurizer's fit (xmtc/features/char_ngrams.py): every n-gram of the texts' words and
 * the number of texts holding it, counted in a hash table instead of a Python set per text.  The walk over a
 * word is scikit-learn's char_wb analyzer's, the one xmtc_char_ngram_ids (text.c) makes: the word padded
 * with the code `space` on both sides; for each n in min_n..max_n every n-gram of the padded word, or the
 * whole padded word once if it is not longer than n (which ends that word).  An n-gram's key is the number
 * its codes spell in base A (codes 1..A-1, so a key's length is its number of digits). */
#include "native.h"

/* Pass 1, over the distinct words (word_len[w] codes of codes[]): each n-gram's key found or inserted in
 * table_keys (1 << bits slots, -1 = empty), its slot appended to gram_slot, word w's slots at
 * gram_slot[gram_ptr[w]:gram_ptr[w + 1]].  Pass 2, over the texts (text t's distinct words
 * pair_word[pair_ptr[t]:pair_ptr[t + 1]]): table_df[s] counts the texts holding slot s's n-gram (table_last:
 * -1 from the caller, the last text counted).  Returns the number of distinct n-grams, or -1 when they would
 * fill more than half of the table or the words' n-grams more than gram_cap slots (nothing is written past
 * either; the caller counts another way). */
XMTC_API int64_t xmtc_char_fit(const int64_t *codes, const int64_t *word_len, int64_t n_words, int64_t min_n,
                               int64_t max_n, int64_t A, int64_t space, const int64_t *pair_ptr,
                               const int32_t *pair_word, int64_t n_texts, int64_t *table_keys, int32_t *table_df,
                               int32_t *table_last, int bits, int64_t *gram_ptr, int64_t *gram_slot,
                               int64_t gram_cap) {
    const int64_t mask = ((int64_t)1 << bits) - 1, limit = ((int64_t)1 << bits) / 2;
    int64_t distinct = 0, g = 0, start = 0;
    for (int64_t w = 0; w < n_words; w++) {
        const int64_t L = word_len[w] + 2;
        gram_ptr[w] = g;
        for (int64_t n = min_n; n <= max_n; n++) {
            const int whole = n >= L;
            const int64_t last = whole ? 0 : L - n, width = whole ? L : n;
            for (int64_t off = 0; off <= last; off++) {
                const int64_t key = xmtc_gram_key(codes + start, L, off, width, A, space);  /* no code is 0 here */
                int64_t h = xmtc_slot(key, bits);
                while (table_keys[h] != -1 && table_keys[h] != key) h = (h + 1) & mask;
                if (table_keys[h] == -1) {
                    if (++distinct > limit) return -1;
                    table_keys[h] = key;
                }
                if (g >= gram_cap) return -1;
                gram_slot[g++] = h;
            }
            if (whole) break;
        }
        start += word_len[w];
    }
    gram_ptr[n_words] = g;
    for (int64_t t = 0; t < n_texts; t++)
        for (int64_t p = pair_ptr[t]; p < pair_ptr[t + 1]; p++) {
            const int64_t w = pair_word[p];
            for (int64_t k = gram_ptr[w]; k < gram_ptr[w + 1]; k++) {
                const int64_t s = gram_slot[k];
                if (table_last[s] != (int32_t)t) {
                    table_last[s] = (int32_t)t;
                    table_df[s]++;
                }
            }
        }
    return distinct;
}
