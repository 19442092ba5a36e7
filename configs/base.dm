# base — one GPU
:set d=768 H=12 L=4 E=8 k=2 r=192 f=3072
:set engram_rows=250000 engram_dim=64 engram_orders=2,3,4 engram_ram=off
:set seq=1024 batch=16
