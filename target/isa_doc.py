"""Generate the encoding reference of docs/isa.md from the ISA table (so it cannot drift).

    python -m infer.target.isa_doc docs/isa.md     # rewrite the generated section in place
"""

from __future__ import annotations

import sys
from pathlib import Path

from infer.target import isa

BEGIN = "<!-- BEGIN GENERATED: python -m infer.target.isa_doc docs/isa.md -->"
END = "<!-- END GENERATED -->"


def render() -> str:
    out = [f"All instructions are {isa.WORD_BITS}-bit words. Header (every instruction): "
           f"bits [0,8) opcode, [8,13) `wait`, [13,18) `signal`, [18,23) `signal2`, [23,28) `wait2` "
           "(semaphore numbers, 0 = none). Fields follow from bit "
           f"{isa.HEADER_BITS}, LSB first; bits above the last field are reserved (must be 0).",
           ""]
    for eng in isa.ENGINES:
        out.append(f"### {eng} engine")
        out.append("")
        for d in isa.INSTRUCTIONS:
            if d.engine != eng:
                continue
            out.append(f"#### `{d.name}` — opcode `{d.opcode:#04x}`, {isa.used_bits(d)} bits used")
            out.append("")
            out.append(d.doc)
            out.append("")
            if d.fields:
                out.append("| bits | field | width | type | kind | meaning |")
                out.append("|---|---|---|---|---|---|")
                for f, pos in d.layout:
                    typ = "signed" if f.signed else "unsigned"
                    out.append(f"| [{pos},{pos + f.bits}) | `{f.name}` | {f.bits} | {typ} | "
                               f"{f.kind} | {f.doc} |")
                out.append("")
    out.append("### Data type codes")
    out.append("")
    out.append("| code | dtype | bytes |")
    out.append("|---|---|---|")
    for code, (name, size) in isa.DTYPES.items():
        out.append(f"| {code} | {name} | {size if size else 'reserved'} |")
    out.append("")
    out.append("Broadcast modes (`bmode`): " + ", ".join(f"{k} = {v}" for k, v in
                                                         isa.BMODES.items()) + ".")
    out.append("")
    out.append("Block formats (`fmt`): " + ", ".join(f"{k} = {v}" for k, v in
                                                      isa.QFORMATS.items()) + "; block axes "
               "(`blocks`): " + ", ".join(f"{k} = {v}" for k, v in isa.QAXES.items()) + ".")
    return "\n".join(out) + "\n"


def update(path: Path) -> bool:
    text = path.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = head + BEGIN + "\n" + render() + END + tail
    if new != text:
        path.write_text(new)
        return True
    return False


def generated_section(text: str) -> str:
    return text.partition(BEGIN)[2].partition(END)[0].lstrip("\n")


if __name__ == "__main__":
    print("updated" if update(Path(sys.argv[1])) else "up to date")
