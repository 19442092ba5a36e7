# nano — tests and the CPU demo (SPEC §1 presets)
:set d=128 H=2 L=2 E=2 k=1 r=32 f=512
:set engram_rows=4096 engram_dim=16 engram_orders=2,3,4 engram_ram=off
:set seq=128 batch=8
