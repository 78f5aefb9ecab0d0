"""Inline MJCF models shared by the unilab.sim tests (no dependency on robots/)."""

from __future__ import annotations

import mujoco

# Free bodies falling onto a plane: contacts, a free-joint motor (one with a ctrlrange, one
# without), a contact sensor, and an inactive weld for the SimulationError test.
FREE_XML = """
<mujoco model="free_bodies">
  <option timestep="0.004"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 .1"/>
    <body name="box" pos="0 0 .3" euler="10 20 30">
      <freejoint name="box_free"/>
      <geom name="box_geom" type="box" size=".1 .08 .06" mass="2"/>
      <site name="box_site" pos=".1 0 0"/>
    </body>
    <body name="ball" pos=".5 0 .4">
      <freejoint name="ball_free"/>
      <geom name="ball_geom" type="sphere" size=".07" mass=".5"/>
    </body>
    <body name="pin" pos="-.5 .2 .6" euler="0 40 0">
      <freejoint/>
      <geom name="pin_geom" type="capsule" size=".03 .15" mass=".3"/>
    </body>
    <body name="target" mocap="true" pos="0 0 1"/>
  </worldbody>
  <equality><weld name="grab" body1="target" body2="box" active="false"/></equality>
  <actuator>
    <motor name="push_x" joint="box_free" gear="1 0 0 0 0 0"/>
    <motor name="spin_z" joint="box_free" gear="0 0 0 0 0 1" ctrlrange="-2 2"/>
  </actuator>
  <sensor>
    <contact name="box_contact" geom1="box_geom" data="found force" reduce="netforce"/>
    <framepos name="box_pos" objtype="site" objname="box_site"/>
    <velocimeter name="box_vel" site="box_site"/>
  </sensor>
  <keyframe>
    <key name="high" qpos="0 0 1 1 0 0 0  .5 0 .8 1 0 0 0  -.5 .2 1 1 0 0 0"/>
  </keyframe>
</mujoco>
"""

# A fixed-base hinge chain with every common actuator kind, joint damping and one actuator
# with an activation (na = 1).
CHAIN_XML = """
<mujoco model="hinge_chain">
  <option timestep="0.002"/>
  <default><joint damping=".05" armature=".01"/></default>
  <worldbody>
    <body name="link1" pos="0 0 1">
      <joint name="j1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03" mass=".5"/>
      <body name="link2" pos=".3 0 0">
        <joint name="j2" type="hinge" axis="0 1 0" damping=".2"/>
        <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03" mass=".4"/>
        <body name="link3" pos=".3 0 0">
          <joint name="j3" type="hinge" axis="0 0 1"/>
          <geom type="capsule" fromto="0 0 0 .2 0 0" size=".025" mass=".3"/>
          <body name="link4" pos=".2 0 0">
            <joint name="j4" type="hinge" axis="1 0 0"/>
            <geom type="box" size=".05 .02 .02" mass=".2"/>
            <site name="tip" pos=".05 0 0"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="m1" joint="j1" gear="2"/>
    <position name="p2" joint="j2" kp="20" kv="1" ctrlrange="-1.5 1.5"/>
    <velocity name="v3" joint="j3" kv="3"/>
    <position name="p4" joint="j4" kp="5" timeconst=".05"/>
  </actuator>
  <sensor>
    <jointpos name="q2" joint="j2"/>
    <jointvel name="qd3" joint="j3"/>
    <framepos name="tip_pos" objtype="site" objname="tip"/>
  </sensor>
  <keyframe>
    <key name="home" qpos="0 0 0 0"/>
    <key name="bent" qpos=".3 -.6 .2 .1" qvel=".1 0 0 0" ctrl="0 -.6 0 .1"/>
  </keyframe>
</mujoco>
"""


def free_model_with_movable_coms() -> mujoco.MjModel:
    """FREE_XML with box and pin compiled as non-simple bodies, so their COM can be randomized."""
    spec = mujoco.MjSpec.from_string(FREE_XML)
    for name in ("box", "pin"):
        spec.body(name).simple = False
    return spec.compile()
