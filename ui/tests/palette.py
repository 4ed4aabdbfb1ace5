"""Prints the run palette of ui/lib/colors.js: 50 colours chosen greedily to be as far apart as
possible (CIEDE2000) among sRGB colours of middle lightness, readable on light and dark pages.
Usage: python3 ui/tests/palette.py"""
import itertools
import math


def srgb_to_lab(rgb):
    def linear(c):
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = lambda t: t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def ciede2000(lab1, lab2):
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c1, c2 = math.hypot(a1, b1), math.hypot(a2, b2)
    cm = (c1 + c2) / 2
    g = 0.5 * (1 - math.sqrt(cm**7 / (cm**7 + 25**7)))
    a1p, a2p = a1 * (1 + g), a2 * (1 + g)
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360
    h2p = math.degrees(math.atan2(b2, a2p)) % 360
    dl, dc = l2 - l1, c2p - c1p
    dh = h2p - h1p
    if c1p * c2p == 0:
        dh = 0
    elif dh > 180:
        dh -= 360
    elif dh < -180:
        dh += 360
    dhh = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    lm, cmp_ = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hm = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        hm = (h1p + h2p) / 2
    else:
        hm = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(hm - 30)) + 0.24 * math.cos(math.radians(2 * hm))
         + 0.32 * math.cos(math.radians(3 * hm + 6)) - 0.20 * math.cos(math.radians(4 * hm - 63)))
    sl = 1 + 0.015 * (lm - 50) ** 2 / math.sqrt(20 + (lm - 50) ** 2)
    sc, sh = 1 + 0.045 * cmp_, 1 + 0.015 * cmp_ * t
    rt = -2 * math.sqrt(cmp_**7 / (cmp_**7 + 25**7)) * math.sin(math.radians(60 * math.exp(-(((hm - 275) / 25) ** 2))))
    return math.sqrt((dl / sl) ** 2 + (dc / sc) ** 2 + (dhh / sh) ** 2 + rt * (dc / sc) * (dhh / sh))


candidates = []
for rgb in itertools.product(range(0, 256, 17), repeat=3):
    lab = srgb_to_lab(rgb)
    if 42 <= lab[0] <= 70 and math.hypot(lab[1], lab[2]) >= 25:
        candidates.append((rgb, lab))
chosen = [min(candidates, key=lambda c: math.dist(c[0], (31, 119, 180)))]
nearest = [ciede2000(c[1], chosen[0][1]) for c in candidates]
while len(chosen) < 50:
    best = max(range(len(candidates)), key=nearest.__getitem__)
    chosen.append(candidates[best])
    nearest = [min(d, ciede2000(c[1], candidates[best][1])) for d, c in zip(nearest, candidates)]
closest = min(ciede2000(a[1], b[1]) for a, b in itertools.combinations(chosen, 2))
print(f"// closest pair: CIEDE2000 {closest:.1f}")
print(", ".join("'#%02x%02x%02x'" % c[0] for c in chosen))
