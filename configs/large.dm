# large — Engram tables in host RAM (4M rows x 64 per order)
:set d=1024 H=16 L=4 E=16 k=2 r=256 f=4096
:set engram_rows=4000000 engram_dim=64 engram_orders=2,3,4 engram_ram=on
:set seq=1024 batch=32
