# small — the smallest GPU preset
:set d=512 H=8 L=4 E=4 k=2 r=128 f=2048
:set engram_rows=25000 engram_dim=32 engram_orders=2,3,4 engram_ram=off
:set seq=512 batch=8
